// SPDX-License-Identifier: Apache-2.0
#include "net/url.h"

#include "base/text.h"

namespace tensorfetch::detail {

std::string sibling_url(std::string_view base_url, std::string_view relative) {
  std::string_view base = base_url.substr(0, base_url.find_first_of("?#"));
  auto slash = base.rfind('/');
  return std::string(base.substr(0, slash + 1)) + encode_path(relative);
}

std::string url_authority(std::string_view url) {
  auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return {};
  auto host_start = scheme_end + 3;
  auto host_end = url.find_first_of("/?#", host_start);
  std::string_view authority = url.substr(host_start, host_end == std::string_view::npos ? url.npos : host_end - host_start);
  if (auto at = authority.rfind('@'); at != std::string_view::npos) authority.remove_prefix(at + 1);
  if (authority.empty()) return {};
  std::string out(url.substr(0, host_start));
  out += ascii_lower(authority);
  return out;
}

}  // namespace tensorfetch::detail
