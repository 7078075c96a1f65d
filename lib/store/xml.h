// SPDX-License-Identifier: Apache-2.0
// Private: the object stores' XML answers (S3 listings and errors, STS) as a flat list of events,
// read with expat: depth-bounded, entities refused, no DTD or external resource loaded.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tensorfetch/error.hpp"

namespace tensorfetch::detail {

/// One element's start (`end` false, no text) or end (`end` true, its text), by the path of
/// local names from the root (`ListBucketResult/Contents/Key`; namespace prefixes dropped). A
/// plain value.
struct XmlEvent {
  std::string path;
  bool end = false;
  std::string text;  ///< character data directly inside the element (at most 1 MiB)
};

/// The events of `xml` in document order. `BadResponse` naming `what` for a document that is
/// not well-formed, is nested more than 16 levels deep, declares an entity, or exceeds 64 MiB.
/// Pure.
[[nodiscard]] Result<std::vector<XmlEvent>> xml_events(std::string_view xml, const char* what);

}  // namespace tensorfetch::detail
