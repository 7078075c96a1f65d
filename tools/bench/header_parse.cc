// SPDX-License-Identifier: Apache-2.0
// bench-header-parse: how fast parse_header validates a very large header.
//
// Builds in memory a realistic header just under the 100,000,000-byte cap (a MoE
// checkpoint with ~800k tensors named like model.layers.{i}.mlp.experts.{j}.down_proj.weight,
// mixed dtypes, 2-D shapes, contiguous data_offsets, __metadata__), then times parse_header
// over several repetitions and reports the best and median in MB/s (MB = 1e6 bytes).
//
//   bench-header-parse [--tensors N] [--reps R]
//
// Without --tensors the header is filled with tensors until the next one would pass the cap.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorfetch/dtype.hpp"
#include "tensorfetch/format.hpp"

#ifndef TF_BENCH_BUILDTYPE
#define TF_BENCH_BUILDTYPE "unknown"
#endif

namespace tf = tensorfetch;

namespace {

constexpr double kGoalMBps = 500.0;

struct Spec {
  std::string name;
  tf::DType dtype;
  std::uint64_t rows, cols;  // 2-D; cols == 0 means a 1-D tensor of `rows`
};

// The layer plan of a DeepSeek-V3-like FP8 MoE: attention and norms, a router, then per
// expert three projections each with an F8 weight and an F32 block scale.
class TensorStream {
 public:
  explicit TensorStream(unsigned experts) : experts_(experts) {}

  Spec next() {
    Spec s;
    const std::string layer = "model.layers." + std::to_string(layer_) + ".";
    if (pos_ < kDense) {
      static constexpr struct {
        const char* name;
        tf::DType dtype;
        std::uint64_t rows, cols;
      } kDenseTensors[kDense] = {
          {"input_layernorm.weight", tf::DType::BF16, 7168, 0},
          {"self_attn.q_a_proj.weight", tf::DType::F8_E4M3, 1536, 7168},
          {"self_attn.q_b_proj.weight", tf::DType::F8_E4M3, 24576, 1536},
          {"self_attn.kv_a_proj_with_mqa.weight", tf::DType::F8_E4M3, 576, 7168},
          {"self_attn.kv_b_proj.weight", tf::DType::F8_E4M3, 32768, 512},
          {"self_attn.o_proj.weight", tf::DType::F8_E4M3, 7168, 16384},
          {"post_attention_layernorm.weight", tf::DType::BF16, 7168, 0},
          {"mlp.gate.weight", tf::DType::BF16, 256, 7168},
          {"mlp.gate.e_score_correction_bias", tf::DType::F32, 256, 0},
      };
      const auto& d = kDenseTensors[pos_];
      s = {layer + d.name, d.dtype, d.rows, d.cols};
    } else {
      const unsigned k = pos_ - kDense;  // 6 tensors per expert
      const unsigned expert = k / 6, proj = (k % 6) / 2;
      const bool scale = k % 2 == 1;
      static constexpr const char* kProj[] = {"gate_proj", "up_proj", "down_proj"};
      s.name = layer + "mlp.experts." + std::to_string(expert) + "." + kProj[proj] +
               (scale ? ".weight_scale_inv" : ".weight");
      const bool down = proj == 2;
      if (scale) {
        s.dtype = tf::DType::F32;
        s.rows = down ? 56 : 16;
        s.cols = down ? 16 : 56;
      } else {
        s.dtype = tf::DType::F8_E4M3;
        s.rows = down ? 7168 : 2048;
        s.cols = down ? 2048 : 7168;
      }
    }
    if (++pos_ == kDense + experts_ * 6) {
      pos_ = 0;
      ++layer_;
    }
    return s;
  }

 private:
  static constexpr unsigned kDense = 9;
  unsigned experts_;
  unsigned layer_ = 0;
  unsigned pos_ = 0;
};

void append_uint(std::string& out, std::uint64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

struct Generated {
  std::string header;  // N bytes: JSON padded with spaces to a multiple of 8
  std::uint64_t tensors = 0;
  std::uint64_t data_size = 0;
};

// Builds a header of `count` tensors, or (count == 0) as many as fit under the cap.
Generated generate(std::uint64_t count) {
  Generated g;
  std::string& h = g.header;
  h.reserve(static_cast<std::size_t>(tf::kMaxHeaderSize) + 4096);
  h += R"({"__metadata__":{"format":"pt","generator":"tensorfetch bench-header-parse",)"
       R"("quantization":"fp8 e4m3, 128x128 block scales"})";
  TensorStream stream(/*experts=*/256);
  std::string entry;
  const std::uint64_t limit = tf::kMaxHeaderSize - 8;  // room for '}' and padding
  while (count == 0 || g.tensors < count) {
    const Spec s = stream.next();
    const std::uint64_t elements = s.cols ? s.rows * s.cols : s.rows;
    const std::uint64_t nbytes = elements * tf::dtype_bits(s.dtype) / 8;
    entry.clear();
    entry += ",\"";
    entry += s.name;
    entry += R"(":{"dtype":")";
    entry += tf::to_string(s.dtype);
    entry += R"(","shape":[)";
    append_uint(entry, s.rows);
    if (s.cols) {
      entry += ',';
      append_uint(entry, s.cols);
    }
    entry += R"(],"data_offsets":[)";
    append_uint(entry, g.data_size);
    entry += ',';
    append_uint(entry, g.data_size + nbytes);
    entry += "]}";
    if (count == 0 && h.size() + entry.size() > limit) break;
    h += entry;
    g.data_size += nbytes;
    ++g.tensors;
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');
  return g;
}

// CPU time of this process (all threads), in seconds: on a busy machine the wall-clock time
// of a run includes time spent waiting for a core; this does not.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

[[noreturn]] void usage(const char* argv0, int code) {
  std::fprintf(code ? stderr : stdout,
               "usage: %s [--tensors N] [--reps R]\n"
               "  --tensors N  tensors in the header (default: as many as fit under the\n"
               "               %llu-byte cap, about 800k)\n"
               "  --reps R     timed repetitions (default 5)\n",
               argv0, static_cast<unsigned long long>(tf::kMaxHeaderSize));
  std::exit(code);
}

std::uint64_t parse_count(const char* argv0, const char* text) {
  std::uint64_t v = 0;
  const char* end = text + std::strlen(text);
  auto r = std::from_chars(text, end, v);
  if (r.ec != std::errc() || r.ptr != end) usage(argv0, 1);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t count = 0, reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--help" || a == "-h") usage(argv[0], 0);
    if (i + 1 >= argc) usage(argv[0], 1);
    if (a == "--tensors") {
      count = parse_count(argv[0], argv[++i]);
      if (count == 0) usage(argv[0], 1);
    } else if (a == "--reps") {
      reps = parse_count(argv[0], argv[++i]);
      if (reps == 0) usage(argv[0], 1);
    } else {
      usage(argv[0], 1);
    }
  }

  const auto t0 = std::chrono::steady_clock::now();
  const Generated g = generate(count);
  const double gen_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::uint64_t n = g.header.size();
  const std::uint64_t file_size = tf::kPrefixSize + n + g.data_size;
  // The start of a file as a reader maps it: the 8-byte prefix, the header, and the first
  // bytes of the data section (which let the header be parsed in place).
  std::string file(tf::kPrefixSize, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  file += g.header;
  file.append(4096, '\0');
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(file.data()), file.size());

  std::printf("bench-header-parse (buildtype %s%s)\n", TF_BENCH_BUILDTYPE,
#ifdef NDEBUG
              ", NDEBUG"
#else
              ""
#endif
  );
  std::printf("  header bytes : %llu (cap %llu; generated in %.2f s)\n",
              static_cast<unsigned long long>(n),
              static_cast<unsigned long long>(tf::kMaxHeaderSize), gen_s);
  std::printf("  tensors      : %llu\n", static_cast<unsigned long long>(g.tensors));
  std::printf("  data section : %.3f TB (file size %llu)\n", g.data_size / 1e12,
              static_cast<unsigned long long>(file_size));
  std::fflush(stdout);

  // Cold: every parse starts from a fresh parser (what one `inspect` of one file does).
  // Warm: one HeaderParser reused (what opening many shards does; simdjson's own advice).
  tf::HeaderParser reused;
  bool all_pass = true;
  for (const bool warm : {false, true}) {
    const char* label = warm ? "warm" : "cold";
    std::printf("  %s (%s)\n", label,
                warm ? "one HeaderParser reused across runs" : "a fresh parser for every run");
    std::vector<double> seconds, cpu;
    for (std::uint64_t r = 0; r < reps; ++r) {
      const double cpu_start = cpu_seconds();
      const auto start = std::chrono::steady_clock::now();
      auto header = warm ? reused.parse_file_prefix(bytes, file_size)
                         : tf::parse_file_prefix(bytes, file_size);
      const auto stop = std::chrono::steady_clock::now();  // before the Header is destroyed
      const double cpu_stop = cpu_seconds();
      if (!header) {
        std::fprintf(stderr, "bench-header-parse: parse_header refused the header: %s: %s\n",
                     std::string(tf::to_string(header.error().code)).c_str(),
                     header.error().message.c_str());
        return 1;
      }
      if (header->tensors().size() != g.tensors || header->data_size != g.data_size ||
          !header->metadata) {
        std::fprintf(stderr, "bench-header-parse: parsed %zu tensors, %llu data bytes: wrong\n",
                     header->tensors().size(),
                     static_cast<unsigned long long>(header->data_size));
        return 1;
      }
      seconds.push_back(std::chrono::duration<double>(stop - start).count());
      cpu.push_back(cpu_stop - cpu_start);
      std::printf("    run %-3llu    : %.4f s  %8.1f MB/s   (cpu %.4f s, %.1f MB/s)\n",
                  static_cast<unsigned long long>(r + 1), seconds.back(), n / 1e6 / seconds.back(),
                  cpu.back(), n / 1e6 / cpu.back());
      std::fflush(stdout);
    }
    std::sort(seconds.begin(), seconds.end());
    std::sort(cpu.begin(), cpu.end());
    const double best = seconds.front();
    const std::size_t m = seconds.size();
    const double median = m % 2 ? seconds[m / 2] : (seconds[m / 2 - 1] + seconds[m / 2]) / 2;
    const double best_mbps = n / 1e6 / best, median_mbps = n / 1e6 / median;
    std::printf("    best       : %.4f s  %8.1f MB/s\n", best, best_mbps);
    std::printf("    median     : %.4f s  %8.1f MB/s  (%llu runs)\n", median, median_mbps,
                static_cast<unsigned long long>(m));
    std::printf("    best cpu   : %.4f s  %8.1f MB/s  (process CPU time; wall includes waiting)\n",
                cpu.front(), n / 1e6 / cpu.front());
    std::printf("    goal       : >= %.0f MB/s (%s, median): %s\n", kGoalMBps, label,
                median_mbps >= kGoalMBps ? "PASS" : "BELOW");
    all_pass = all_pass && median_mbps >= kGoalMBps;
  }
  std::printf("  result       : %s\n", all_pass ? "PASS (cold and warm)" : "BELOW the goal in at least one series");
  return 0;
}
