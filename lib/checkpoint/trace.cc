// SPDX-License-Identifier: Apache-2.0
// The public trace API (tensorfetch/trace.hpp): the base layer's recording, written out as Chrome
// trace-event JSON.
#include "tensorfetch/trace.hpp"

#include <unistd.h>

#include <mutex>

#include <nlohmann/json.hpp>

#include "base/fs.h"
#include "base/trace.h"

namespace tensorfetch {

namespace {

std::mutex path_mutex;
std::string trace_path;  // guarded by path_mutex: where the running trace goes

double micros(detail::trace::Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

}  // namespace

Result<void> trace_start(const std::string& path) {
  if (path.empty()) return fail(ErrorCode::InvalidArgument, "trace: the file name is empty");
  std::lock_guard lock(path_mutex);
  if (!detail::trace::begin()) {
    return fail(ErrorCode::InvalidArgument, "trace: a trace is already being recorded (to " + trace_path + ")");
  }
  trace_path = path;
  detail::trace::name_track(detail::trace::thread_track(), "main");
  return {};
}

bool trace_on() noexcept { return detail::trace::on(); }

void trace_span(std::string_view name, std::string_view category, std::chrono::steady_clock::time_point start,
                std::chrono::steady_clock::time_point end) {
  if (!detail::trace::on()) return;
  detail::trace::add(detail::trace::Event{std::string(name), std::string(category), 'X', start, end,
                                          detail::trace::thread_track(), {}});
}

Result<void> trace_stop() {
  std::lock_guard lock(path_mutex);
  if (!detail::trace::on()) return fail(ErrorCode::InvalidArgument, "trace: no trace is being recorded");
  auto rec = detail::trace::end();
  const auto pid = static_cast<int>(::getpid());
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", "tensorfetch"}}}});
  for (const auto& [track, name] : rec.track_names) {
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", track}, {"args", {{"name", name}}}});
    // Threads first, then the connections in order.
    events.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", pid}, {"tid", track}, {"args", {{"sort_index", track}}}});
  }
  for (const auto& e : rec.events) {
    nlohmann::json j = {{"name", e.name}, {"cat", e.category}, {"ph", std::string(1, e.phase)}, {"pid", pid},
                        {"tid", e.track}, {"ts", micros(e.start - rec.origin)}};
    if (e.phase == 'X') j["dur"] = micros(e.end - e.start);
    if (e.phase == 'i') j["s"] = "t";
    if (!e.args.empty()) {
      nlohmann::json args = nlohmann::json::object();
      for (const auto& [k, v] : e.args) args[k] = v;
      j["args"] = std::move(args);
    }
    events.push_back(std::move(j));
  }
  const nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  const std::string path = trace_path;
  trace_path.clear();
  auto written = detail::write_file_atomically(path, doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  if (!written) return fail(written.error().with_context("trace"));
  return {};
}

}  // namespace tensorfetch
