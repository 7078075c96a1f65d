// SPDX-License-Identifier: Apache-2.0
#include "hub/file_facts.h"

#include <cstdlib>

#include "base/text.h"
#include "hub/hub_errors.h"

namespace tensorfetch::detail {

namespace {

std::string header_of(const Headers& headers, std::string_view name) {
  auto it = headers.find(std::string(name));
  return it == headers.end() ? std::string() : it->second;
}

}  // namespace

std::string find_header(const HttpResponse& r, std::string_view name) {
  if (auto v = header_of(r.headers, name); !v.empty()) return v;
  for (auto it = r.redirects.rbegin(); it != r.redirects.rend(); ++it) {
    if (auto v = header_of(it->headers, name); !v.empty()) return v;
  }
  return {};
}

std::optional<std::uint64_t> HubFileFacts::size() const {
  if (linked_size.empty()) return std::nullopt;
  return std::strtoull(linked_size.c_str(), nullptr, 10);
}

Result<HubFileFacts> hub_file_facts(const HttpResponse& r, const std::string& what) {
  HubFileFacts facts;
  facts.commit = find_header(r, "x-repo-commit");
  if (!facts.commit.empty() && !is_commit_id(facts.commit)) {
    return fail(ErrorCode::BadResponse, what + ": the server named the commit " + quote_name(facts.commit) +
                                            " (X-Repo-Commit), which is not a commit id (40 lower-case hex "
                                            "digits); refused: " + r.url);
  }
  facts.linked_etag = find_header(r, "x-linked-etag");
  facts.linked_size = find_header(r, "x-linked-size");
  return facts;
}

}  // namespace tensorfetch::detail
