#pragma once
// A TOML value as TOML text: for the messages that quote a scenario's values and for the scenario
// text a sweep case is written as. toml++ writes a float with 17 significant digits (0.9 as
// 0.90000000000000002); here a float is the shortest text that reads back as the same double,
// still a TOML float (1.0, not 1), also inside arrays and inline tables.
#include <string>
#include <string_view>

#include <toml++/toml.h>

namespace attn {

std::string toml_value_text(const toml::node& n);

// A TOML document (a scenario or a sweep file) parsed; a syntax error is an InputError naming `file`,
// the line and the column.
toml::table parse_toml_document(std::string_view text, const std::string& file);

}  // namespace attn
