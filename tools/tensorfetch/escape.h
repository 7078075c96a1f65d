// SPDX-License-Identifier: Apache-2.0
// Text that is safe to print on a terminal. Tensor names, `__metadata__`, index metadata,
// server strings (ETags, commits, URLs) and error messages may come from a hostile file or
// server; printed raw, their escape sequences would rewrite the screen, hide text or fake
// output. Every human-readable print site of the CLI passes such text through `escape_text`;
// JSON output stays exact (JSON has its own escaping).
#pragma once

#include <string>
#include <string_view>

namespace tensorfetch::cli {

/// `text` with everything a terminal would interpret, and every byte that is not UTF-8,
/// replaced by a visible escape: C0 controls (`\n`, `\r`, `\t`, else `\xNN`), DEL (`\x7f`),
/// C1 controls U+0080..U+009F, the Unicode bidi controls (U+061C, U+200E, U+200F,
/// U+202A..U+202E, U+2066..U+2069) and the line/paragraph separators U+2028/U+2029 (`\uNNNN`),
/// bytes that are not well-formed UTF-8 (`\xNN` each), and the backslash itself (`\\`), so the
/// result is unambiguous. Anything else (printable ASCII, other well-formed UTF-8) is kept.
/// Pure; thread-safe.
[[nodiscard]] std::string escape_text(std::string_view text);

}  // namespace tensorfetch::cli
