// SPDX-License-Identifier: Apache-2.0
// Request parsing of the test server (see request_internal.h).
#include <algorithm>
#include <cctype>
#include <chrono>

#include "request_internal.h"

namespace tensorfetch::testing::detail {

namespace {

int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool valid_name_segment(std::string_view s) {
  if (s.empty() || s == "." || s == "..") return false;
  for (char c : s) {
    if (c == '/' || c == '\\' || static_cast<unsigned char>(c) < 0x20) return false;
  }
  return true;
}

}  // namespace

std::string pct_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hexval(s[i + 1]) * 16 + hexval(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::string trim(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::string strip_port(std::string_view host) {
  if (!host.empty() && host.front() == '[') {
    auto close = host.find(']');
    return std::string(host.substr(0, close == std::string_view::npos ? host.size() : close + 1));
  }
  auto colon = host.rfind(':');
  return std::string(colon == std::string_view::npos ? host : host.substr(0, colon));
}

bool is_hex40(std::string_view s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::int64_t epoch_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::vector<std::string> split_path(std::string_view raw_path, std::vector<std::size_t>* ends) {
  std::vector<std::string> segs;
  std::size_t i = 0;
  if (!raw_path.empty() && raw_path.front() == '/') i = 1;
  while (i <= raw_path.size()) {
    auto j = raw_path.find('/', i);
    if (j == std::string_view::npos) j = raw_path.size();
    segs.push_back(pct_decode(raw_path.substr(i, j - i)));
    if (ends) ends->push_back(j);
    i = j + 1;
  }
  return segs;
}

std::string pct_encode(std::string_view s, bool keep_slash) {
  static const char* digits = "0123456789ABCDEF";
  std::string out;
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '.' || c == '_' || c == '~' ||
        (keep_slash && c == '/')) {
      out.push_back(c);
    } else {
      out += {'%', digits[u >> 4], digits[u & 15]};
    }
  }
  return out;
}

std::string join(const std::vector<std::string>& v, std::size_t from, std::size_t to, char sep) {
  std::string s;
  for (std::size_t i = from; i < to && i < v.size(); ++i) {
    if (i > from) s.push_back(sep);
    s += v[i];
  }
  return s;
}

// Routes with a repo id (ORG/NAME, or a legacy id without an org when ORG/NAME does not fit):
//   /[datasets/]{id}/resolve/{rev}/{path...}
//   /api/{models|datasets}/{id}[/revision/{rev...}]
//   /api/resolve-cache/{models|datasets}/{org}/{name}/{rev}/{path...}
Route classify(std::string_view target) {
  Route r;
  auto q = target.find('?');
  std::vector<std::size_t> ends;
  auto segs = split_path(target.substr(0, q), &ends);
  const std::size_t n = segs.size();
  auto at = [&](std::size_t i) -> const std::string& {
    static const std::string none;
    return i < n ? segs[i] : none;
  };
  if (segs[0] == "_admin" && n >= 2) {
    r.kind = "admin";
    r.admin = segs[1];
    return r;
  }
  if (segs[0] == "cdn" && n >= 2) {
    r.kind = "cdn";
    r.blob = segs[1];
    return r;
  }
  // The repo id starts at segment `from` and has `parts` segments (1: legacy, 2: org/name).
  auto set_repo = [&](bool dataset, std::size_t from, std::size_t parts) {
    r.dataset = dataset;
    r.legacy_id = parts == 1;
    r.bad_repo_name = false;
    std::string id;
    for (std::size_t i = from; i < from + parts; ++i) {
      if (!valid_name_segment(segs[i])) r.bad_repo_name = true;
      id += (i > from ? "/" : "") + segs[i];
    }
    r.repo = (dataset ? "datasets/" : "") + id;
    r.repo_rel = r.repo;
    r.repo_end = ends[from + parts - 1];
  };
  auto set_resolve = [&](std::size_t rev_at) {
    r.rev_segments.assign(segs.begin() + static_cast<std::ptrdiff_t>(rev_at), segs.end());
    r.revision = r.rev_segments[0];
    r.file = join(r.rev_segments, 1, r.rev_segments.size());
  };
  if (segs[0] == "api" && at(1) == "resolve-cache" && n >= 7 &&
      (at(2) == "models" || at(2) == "datasets")) {
    r.kind = "resolve_cache";
    set_repo(at(2) == "datasets", 3, 2);
    set_resolve(5);
    return r;
  }
  if (segs[0] == "api" && n >= 3 && (at(1) == "models" || at(1) == "datasets")) {
    const bool dataset = at(1) == "datasets";
    r.kind = "api";
    if (n == 4) {
      set_repo(dataset, 2, 2);
      r.revision = "main";
    } else if (n >= 6 && at(4) == "revision") {
      set_repo(dataset, 2, 2);
      r.revision = join(segs, 5, n);
    } else if (n == 3) {
      set_repo(dataset, 2, 1);
      r.revision = "main";
    } else if (n >= 5 && at(3) == "revision") {
      set_repo(dataset, 2, 1);
      r.revision = join(segs, 4, n);
    } else {
      r.kind = "other";  // another API route of a repo (logged with its repo)
      if (n >= 4) set_repo(dataset, 2, 2);
    }
    return r;
  }
  const bool dataset = segs[0] == "datasets";
  const std::size_t base = dataset ? 1 : 0;
  if (n >= base + 5 && at(base + 2) == "resolve") {
    r.kind = "resolve";
    set_repo(dataset, base, 2);
    set_resolve(base + 3);
  } else if (n >= base + 4 && at(base + 1) == "resolve") {
    r.kind = "resolve";
    set_repo(dataset, base, 1);
    set_resolve(base + 2);
  }
  return r;
}

std::optional<std::uint64_t> parse_u64(std::string_view s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return v;
}

RangeSpec parse_range(std::string_view h, std::uint64_t size) {
  RangeSpec r;
  std::string s = trim(h);
  if (s.rfind("bytes=", 0) != 0) return r;
  std::string spec = trim(std::string_view(s).substr(6));
  if (spec.find(',') != std::string::npos) return r;
  auto dash = spec.find('-');
  if (dash == std::string::npos) return r;
  std::string a = trim(std::string_view(spec).substr(0, dash));
  std::string b = trim(std::string_view(spec).substr(dash + 1));
  if (a.empty()) {
    auto n = parse_u64(b);
    if (!n) return r;
    if (*n == 0 || size == 0) {
      r.kind = RangeSpec::Unsatisfiable;
      return r;
    }
    r.kind = RangeSpec::Ok;
    r.first = size - std::min(*n, size);
    r.last = size - 1;
    return r;
  }
  auto first = parse_u64(a);
  if (!first) return r;
  std::optional<std::uint64_t> last;
  if (!b.empty()) {
    last = parse_u64(b);
    if (!last || *last < *first) return r;
  }
  if (*first >= size) {
    r.kind = RangeSpec::Unsatisfiable;
    return r;
  }
  r.kind = RangeSpec::Ok;
  r.first = *first;
  r.last = last ? std::min(*last, size - 1) : size - 1;
  return r;
}

bool etag_matches(std::string_view header, std::string_view etag) {
  std::size_t i = 0;
  while (i <= header.size()) {
    auto j = header.find(',', i);
    if (j == std::string_view::npos) j = header.size();
    std::string t = trim(header.substr(i, j - i));
    if (t.rfind("W/", 0) == 0) t = t.substr(2);
    if (t == "*" || t == etag) return true;
    i = j + 1;
  }
  return false;
}

}  // namespace tensorfetch::testing::detail
