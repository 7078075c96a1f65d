// SPDX-License-Identifier: Apache-2.0
// `tensorfetch inspect`: a table (grouping repeated layers) and totals, or the JSON object.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "commands.h"
#include "escape.h"
#include "json_stream.h"
#include "progress.h"
#include "tp.h"

namespace tensorfetch::cli {

namespace {

// Listings longer than this are grouped by layer unless --all is given.
constexpr std::size_t kGroupThreshold = 40;

std::string with_commas(std::uint64_t n) {
  const std::string digits = std::to_string(n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string human_bytes(std::uint64_t n) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (n < 1024) return std::to_string(n) + " B";
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  return buf;
}

// The `__metadata__` of the first file, or nullptr when it has none (or there is no file).
const Metadata* first_file_metadata(const Checkpoint& ckpt) {
  const Header* h = ckpt.header(0);
  return h && h->metadata ? &*h->metadata : nullptr;
}

std::string shape_text(std::span<const std::uint64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// "0-3,7,9-10" from a sorted set.
std::string compress(const std::set<std::uint64_t>& values) {
  std::string out;
  for (auto it = values.begin(); it != values.end();) {
    std::uint64_t first = *it, last = *it;
    auto next = std::next(it);
    while (next != values.end() && *next == last + 1) last = *next++;
    if (!out.empty()) out += ',';
    out += std::to_string(first);
    if (last != first) out += (last == first + 1 ? "," : "-") + std::to_string(last);
    it = next;
  }
  return out;
}

// Splits a name at dots into segments, marking the purely numeric ones.
struct NameShape {
  std::string key;                      // name with numeric segments replaced by '#' (and a
                                        // '#' or '\\' of the name itself preceded by '\\')
  std::vector<std::uint64_t> numbers;   // the numeric segments, in order
};

NameShape name_shape(std::string_view name) {
  NameShape out;
  std::size_t start = 0;
  while (true) {
    auto dot = name.find('.', start);
    auto seg = name.substr(start, dot == std::string_view::npos ? name.npos : dot - start);
    bool numeric = !seg.empty() && seg.size() <= 18 &&
                   std::all_of(seg.begin(), seg.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
                   (seg.size() == 1 || seg.front() != '0');
    if (numeric) {
      out.key += '#';
      out.numbers.push_back(std::stoull(std::string(seg)));
    } else {
      for (char c : seg) {
        if (c == '#' || c == '\\') out.key += '\\';
        out.key += c;
      }
    }
    if (dot == std::string_view::npos) break;
    out.key += '.';
    start = dot + 1;
  }
  return out;
}

struct Row {
  std::string name;
  std::size_t count = 1;
  std::string dtype;
  std::string shape;
  std::uint64_t bytes = 0;
  std::string file;
};

std::vector<Row> table_rows(const Checkpoint& ckpt, bool group) {
  std::vector<Row> rows;
  const auto& files = ckpt.files();
  if (!group) {
    for (const auto& t : ckpt.tensors()) {
      rows.push_back(Row{escape_text(t.info->name), 1, std::string(to_string(t.info->dtype)),
                         shape_text(t.info->shape), t.info->nbytes(), escape_text(files[t.file].path)});
    }
    return rows;
  }
  // Group by (name with numbers masked, dtype, shape), in order of first appearance.
  struct Group {
    std::vector<std::set<std::uint64_t>> numbers;
    std::string template_name;
    Row row;
    std::set<std::size_t> files;
  };
  std::vector<Group> groups;
  std::map<std::string, std::size_t> by_key;
  for (const auto& t : ckpt.tensors()) {
    NameShape ns = name_shape(t.info->name);
    std::string dtype(to_string(t.info->dtype));
    std::string shape = shape_text(t.info->shape);
    std::string key = ns.key + '\0' + dtype + '\0' + shape;
    auto [it, inserted] = by_key.emplace(key, groups.size());
    if (inserted) {
      Group g;
      g.template_name = ns.key;
      g.numbers.resize(ns.numbers.size());
      g.row = Row{escape_text(t.info->name), 0, dtype, shape, 0, ""};
      groups.push_back(std::move(g));
    }
    Group& g = groups[it->second];
    for (std::size_t i = 0; i < ns.numbers.size(); ++i) g.numbers[i].insert(ns.numbers[i]);
    g.row.count += 1;
    g.row.bytes += t.info->nbytes();
    g.files.insert(t.file);
  }
  for (auto& g : groups) {
    if (g.row.count > 1) {
      std::string name;
      std::size_t n = 0;
      for (std::size_t i = 0; i < g.template_name.size(); ++i) {
        const char c = g.template_name[i];
        if (c == '\\') {
          name += g.template_name[++i];  // a '#' or '\\' of the name
        } else if (c == '#') {
          const auto& set = g.numbers[n++];
          name += set.size() == 1 ? std::to_string(*set.begin()) : "{" + compress(set) + "}";
        } else {
          name += c;
        }
      }
      g.row.name = escape_text(name);
    }
    g.row.file = g.files.size() == 1 ? escape_text(files[*g.files.begin()].path)
                                     : std::to_string(g.files.size()) + " files";
    rows.push_back(std::move(g.row));
  }
  return rows;
}

struct Totals {
  ParameterCount parameters;  // as the Hub counts them
  std::uint64_t total_bytes = 0;
  std::uint64_t file_bytes = 0;
};

Totals totals(const Checkpoint& ckpt) {
  Totals t;
  std::vector<const TensorInfo*> infos;
  infos.reserve(ckpt.tensors().size());
  for (const auto& ref : ckpt.tensors()) {
    infos.push_back(ref.info);
    t.total_bytes += ref.info->nbytes();
  }
  std::optional<std::string_view> config;
  if (ckpt.config_json()) config = *ckpt.config_json();
  t.parameters = count_parameters(infos, config);
  for (const auto& f : ckpt.files()) t.file_bytes += f.size;
  return t;
}

// `--tp N`: what each rank needs, under which convention.
struct TpSummary {
  std::string rule;
  std::vector<RankBytes> ranks;
};

Result<std::optional<TpSummary>> tp_summary(const Checkpoint& ckpt, const InspectOptions& options) {
  if (options.tp_world == 0) return std::optional<TpSummary>{};
  auto rules = load_tp_rules(options.tp_rules, options.expert_parallel);
  if (!rules) return fail(rules.error());
  auto model = ckpt.tp_model();
  if (!model) return fail(model.error());
  auto ranks = rank_bytes(ckpt, options.tp_world, *rules);
  if (!ranks) return fail(ranks.error());
  return std::optional<TpSummary>(TpSummary{describe_tp(*model, *rules), std::move(*ranks)});
}

// The documented object, streamed (see json_stream.h): memory stays flat however many tensors
// there are. Stops early, returning false, when interrupted (or when writing fails).
bool print_json(const Checkpoint& ckpt, const std::optional<TpSummary>& tp) {
  using nlohmann::ordered_json;
  JsonObjectStream out(stdout);
  out.member("location", ckpt.location());
  out.member("sharded", ckpt.sharded());
  out.begin_array("files");
  for (std::size_t i = 0; i < ckpt.files().size(); ++i) {
    const auto& f = ckpt.files()[i];
    out.element({{"path", f.path},
                 {"size", f.size},
                 {"header_size", ckpt.header(i)->header_size},
                 {"etag", f.etag ? ordered_json(*f.etag) : ordered_json(nullptr)},
                 {"sha256", f.sha256 ? ordered_json(*f.sha256) : ordered_json(nullptr)}});
  }
  out.end_array();
  const Metadata* md = first_file_metadata(ckpt);
  out.member("metadata", md ? ordered_json(*md) : ordered_json(nullptr));
  out.begin_array("tensors");
  std::size_t count = 0;
  for (const auto& ref : ckpt.tensors()) {
    if ((++count & 4095) == 0 && interrupted()) return false;
    out.element({{"name", std::string_view(ref.info->name)},
                 {"dtype", to_string(ref.info->dtype)},
                 {"shape", std::span<const std::uint64_t>(ref.info->shape)},
                 {"file", ckpt.files()[ref.file].path},
                 {"data_offsets", {ref.info->begin, ref.info->end}}});
  }
  out.end_array();
  Totals t = totals(ckpt);
  ordered_json params = ordered_json::object();
  for (const auto& [dtype, n] : t.parameters.by_dtype) params[std::string(to_string(dtype))] = n;
  out.member("parameters", params);
  out.member("total_parameters", t.parameters.total);
  out.member("parameter_rule", t.parameters.rule);
  out.member("total_bytes", t.total_bytes);
  if (ckpt.commit()) out.member("commit", *ckpt.commit());
  if (ckpt.remote()) out.member("requests", ckpt.requests());
  if (const auto& index = ckpt.index()) {
    ordered_json im = ordered_json::object();
    if (index->total_size) im["total_size"] = *index->total_size;
    if (index->total_parameters) im["total_parameters"] = *index->total_parameters;
    for (const auto& [k, v] : index->extra_metadata) im[k] = v;
    out.member("index_metadata", im);
  }
  if (tp) {
    ordered_json ranks = ordered_json::array();
    for (const auto& r : tp->ranks) {
      ranks.push_back({{"rank", r.rank},
                       {"tensors", r.tensors},
                       {"bytes", r.bytes},
                       {"sliced_bytes", r.sliced_bytes},
                       {"whole_bytes", r.whole_bytes}});
    }
    out.member("tp", ordered_json{{"world", tp->ranks.size()}, {"rule", tp->rule}, {"ranks", ranks}});
  }
  return out.end();
}

void print_table(const Checkpoint& ckpt, bool all, const std::optional<TpSummary>& tp) {
  const bool group = !all && ckpt.tensors().size() > kGroupThreshold;
  std::vector<Row> rows = table_rows(ckpt, group);
  Row head{"NAME", 0, "DTYPE", "SHAPE", 0, "FILE"};
  std::size_t wn = head.name.size(), wd = head.dtype.size(), ws = head.shape.size(), wb = 4, wc = 5;
  for (const auto& r : rows) {
    wn = std::max(wn, r.name.size());
    wd = std::max(wd, r.dtype.size());
    ws = std::max(ws, r.shape.size());
    wb = std::max(wb, human_bytes(r.bytes).size());
    wc = std::max(wc, std::to_string(r.count).size() + 1);
  }
  auto pad = [](const std::string& s, std::size_t w) { return s + std::string(w - std::min(w, s.size()), ' '); };
  auto rpad = [](const std::string& s, std::size_t w) { return std::string(w - std::min(w, s.size()), ' ') + s; };
  std::ostringstream os;
  os << escape_text(ckpt.location()) << ": " << ckpt.tensors().size() << " tensors in " << ckpt.files().size()
     << (ckpt.files().size() == 1 ? " file" : " files") << (ckpt.sharded() ? " (sharded)" : "")
     << "\n\n";
  os << pad("NAME", wn) << "  " << (group ? rpad("COUNT", wc) + "  " : "") << pad("DTYPE", wd)
     << "  " << pad("SHAPE", ws) << "  " << rpad("SIZE", wb) << "  FILE\n";
  for (const auto& r : rows) {
    os << pad(r.name, wn) << "  " << (group ? rpad(r.count > 1 ? "x" + std::to_string(r.count) : "", wc) + "  " : "")
       << pad(r.dtype, wd) << "  " << pad(r.shape, ws) << "  " << rpad(human_bytes(r.bytes), wb)
       << "  " << r.file << '\n';
  }
  if (group) os << "(" << rows.size() << " rows for " << ckpt.tensors().size()
                << " tensors; repeated layers grouped, --all lists every tensor)\n";

  Totals t = totals(ckpt);
  os << "\nparameters   " << with_commas(t.parameters.total);
  std::string sep = "  (";
  for (const auto& [dtype, n] : t.parameters.by_dtype) {
    os << sep << to_string(dtype) << ' ' << with_commas(n);
    sep = ", ";
  }
  os << (t.parameters.by_dtype.empty() ? "" : ")") << '\n';
  if (t.parameters.rule != "unquantized") {
    os << "counted as   " << escape_text(t.parameters.rule) << " (" << t.parameters.packed_tensors << " packed, "
       << t.parameters.skipped_tensors << " bookkeeping tensors)\n";
  }
  if (t.parameters.config_warning) os << "note         " << escape_text(*t.parameters.config_warning) << '\n';
  os << "tensor data  " << with_commas(t.total_bytes) << " bytes (" << human_bytes(t.total_bytes) << ")\n";
  os << "files        " << ckpt.files().size() << ", " << with_commas(t.file_bytes) << " bytes ("
     << human_bytes(t.file_bytes) << ")\n";
  if (const auto& index = ckpt.index()) {
    auto claim = [&](const char* what, const std::optional<std::uint64_t>& v, std::uint64_t actual) {
      if (!v) return;
      os << "index        " << what << ' ' << with_commas(*v)
         << (*v == actual ? " (matches)" : " (differs from the computed " + with_commas(actual) + "; not used)")
         << '\n';
    };
    claim("total_parameters", index->total_parameters, t.parameters.total);
    claim("total_size", index->total_size, t.total_bytes);
  }
  if (ckpt.commit()) os << "commit       " << escape_text(*ckpt.commit()) << '\n';
  if (ckpt.remote()) os << "requests     " << ckpt.requests() << " (HTTP, to read every header)\n";
  const Metadata* md = first_file_metadata(ckpt);
  os << "metadata     ";
  if (!md || md->empty()) {
    os << "(none)\n";
  } else {
    std::string s;
    for (const auto& [k, v] : *md) s += (s.empty() ? "" : ", ") + k + "=" + v;
    os << escape_text(s) << '\n';
  }
  if (tp) {
    os << "\ntensor parallel, " << tp->ranks.size() << (tp->ranks.size() == 1 ? " rank" : " ranks") << " ("
       << escape_text(tp->rule) << "): bytes each rank needs\n";
    for (const auto& r : tp->ranks) {
      os << "  rank " << r.rank << "  " << with_commas(r.bytes) << " bytes (" << human_bytes(r.bytes) << "), "
         << r.tensors << " tensors: " << with_commas(r.sliced_bytes) << " in slices + "
         << with_commas(r.whole_bytes) << " whole\n";
    }
  }
  std::cout << os.str();
}

}  // namespace

int report(const Error& error) {
  std::cerr << "tensorfetch: error: " << escape_text(error.message) << '\n';
  return exit_code(error.code);
}

int run_inspect(const InspectOptions& options) {
  OpenOptions open = options.open;
  open.cancel = interrupt_token();
  auto ckpt = Checkpoint::open(options.location, open);
  if (!ckpt) return report(ckpt.error());
  auto tp = tp_summary(*ckpt, options);  // before any output: an unsplittable tensor prints nothing
  if (!tp) return report(tp.error());
  if (options.json) {
    if (!print_json(*ckpt, *tp)) return 1;
  } else {
    print_table(*ckpt, options.all, *tp);
  }
  std::cout.flush();
  return std::cout && !interrupted() ? 0 : 1;
}

}  // namespace tensorfetch::cli
