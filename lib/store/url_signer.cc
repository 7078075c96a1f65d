// SPDX-License-Identifier: Apache-2.0
#include "store/url_signer.h"

#include <algorithm>
#include <chrono>

namespace tensorfetch::detail {

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string without_query(std::string_view url) { return std::string(url.substr(0, url.find_first_of("?#"))); }

std::string redact_signed_urls(std::string_view text) {
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    const auto q = text.find('?', i);
    if (q == std::string_view::npos) break;
    // The query runs to the end of the URL: a space, a quote, a closing bracket or a newline.
    auto end = text.find_first_of(" \t\r\n'\")>,", q);
    if (end == std::string_view::npos) end = text.size();
    // Punctuation that ends a sentence or a clause ("URL: HTTP 403") is not the URL's.
    while (end > q + 1 && std::string_view(":;,.").find(text[end - 1]) != std::string_view::npos) --end;
    const std::string_view query = text.substr(q, end - q);
    out.append(text.substr(i, q - i));
    const bool signed_query = query.find("X-Amz-") != std::string_view::npos ||
                              query.find("x-amz-") != std::string_view::npos ||
                              query.find("X%2DAmz") != std::string_view::npos || query.starts_with("?sig=") ||
                              query.find("&sig=") != std::string_view::npos;
    if (!signed_query) out.append(query);
    i = end;
  }
  out.append(text.substr(std::min(i, text.size())));
  return out;
}

}  // namespace tensorfetch::detail
