// SPDX-License-Identifier: Apache-2.0
#include "store/xml.h"

#include <expat.h>

#include <memory>
#include <type_traits>

namespace tensorfetch::detail {

namespace {

struct XmlCollector {
  std::vector<std::string> stack;
  std::vector<XmlEvent> events;
  std::string text;
  bool too_deep = false;
  XML_Parser parser = nullptr;

  std::string path() const {
    std::string p;
    for (const auto& s : stack) p += (p.empty() ? "" : "/") + s;
    return p;
  }
};

constexpr std::size_t kMaxXmlDepth = 16;

}  // namespace

Result<std::vector<XmlEvent>> xml_events(std::string_view xml, const char* what) {
  XmlCollector c;
  std::unique_ptr<std::remove_pointer_t<XML_Parser>, void (*)(XML_Parser)> parser(XML_ParserCreate("UTF-8"),
                                                                                  XML_ParserFree);
  if (!parser) return fail(ErrorCode::Io, "out of memory creating an XML parser");
  c.parser = parser.get();
  XML_SetUserData(parser.get(), &c);
  XML_SetElementHandler(
      parser.get(),
      [](void* data, const XML_Char* name, const XML_Char**) {
        auto* c = static_cast<XmlCollector*>(data);
        if (c->stack.size() >= kMaxXmlDepth) {
          c->too_deep = true;
          XML_StopParser(c->parser, XML_FALSE);
          return;
        }
        std::string_view n(name);
        // Namespaced names (expat without namespace processing keeps prefixes): the local part.
        if (auto colon = n.rfind(':'); colon != std::string_view::npos) n.remove_prefix(colon + 1);
        c->stack.emplace_back(n);
        c->text.clear();
        c->events.push_back(XmlEvent{c->path(), false, {}});
      },
      [](void* data, const XML_Char*) {
        auto* c = static_cast<XmlCollector*>(data);
        c->events.push_back(XmlEvent{c->path(), true, c->text});
        c->text.clear();
        if (!c->stack.empty()) c->stack.pop_back();
      });
  XML_SetCharacterDataHandler(parser.get(), [](void* data, const XML_Char* s, int len) {
    auto* c = static_cast<XmlCollector*>(data);
    if (c->text.size() < (1u << 20)) c->text.append(s, static_cast<std::size_t>(len));
  });
  // Documents declaring entities are refused outright (S3 never sends any).
  XML_SetEntityDeclHandler(parser.get(), [](void* data, const XML_Char*, int, const XML_Char*, int, const XML_Char*,
                                            const XML_Char*, const XML_Char*, const XML_Char*) {
    XML_StopParser(static_cast<XmlCollector*>(data)->parser, XML_FALSE);
  });
  if (xml.size() > (64u << 20)) return fail(ErrorCode::BadResponse, std::string(what) + ": answer larger than 64 MiB");
  if (XML_Parse(parser.get(), xml.data(), static_cast<int>(xml.size()), XML_TRUE) != XML_STATUS_OK) {
    const std::string why = c.too_deep ? "nested more than 16 levels deep"
                                       : XML_ErrorString(XML_GetErrorCode(parser.get()));
    return fail(ErrorCode::BadResponse, std::string(what) + ": not well-formed XML (" + why + ", line " +
                                            std::to_string(XML_GetCurrentLineNumber(parser.get())) + ")");
  }
  return std::move(c.events);
}

}  // namespace tensorfetch::detail
