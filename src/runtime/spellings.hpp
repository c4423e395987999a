// src/runtime/spellings.hpp — a table of an enum's spellings, read both ways: the one way every
// public enum gets its name / parse pair (src/runtime/names.cpp, src/ops/names.cpp).
//
// Every public enum E has, declared next to it in its header,
//   const char* <e>_name(E)                         its name: the first spelling of its value
//   std::optional<E> parse_<e>(const std::string&)  any spelling, matched exactly (case and all);
//                                                   nullopt for anything else
// so name -> parse -> the same value always holds (tests/cpu/enum_names_test.cpp). The CLI and
// the Python binding parse with these and nothing else; their messages list the spellings they
// show. A value outside the enum (a cast integer) is named "?" unless the caller says otherwise.
#pragma once
#include <cstddef>
#include <optional>
#include <string>

namespace tw {

template <class E>
struct Spelling {
  const char* text;
  E value;
};

template <class E, size_t N>
const char* name_in(const Spelling<E> (&table)[N], E v, const char* unknown = "?") {
  for (const Spelling<E>& s : table)
    if (s.value == v) return s.text;
  return unknown;
}

template <class E, size_t N>
std::optional<E> parse_in(const Spelling<E> (&table)[N], const std::string& text) {
  for (const Spelling<E>& s : table)
    if (text == s.text) return s.value;
  return std::nullopt;
}

}  // namespace tw
