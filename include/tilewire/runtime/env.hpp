// tilewire/runtime/env.hpp — the one table of tilewire's environment variables.
//
// Every knob is declared once in src/runtime/env.cpp (name, type, default, doc);
// `tilewire info --env` prints the table with the values in effect.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace tw::env {

enum class Type { kBool, kInt, kBytes, kString };

struct Var {
  const char* name;
  Type type;
  const char* default_value;
  const char* doc;
};

// All variables tilewire reads, in display order.
std::span<const Var> table();
const Var* find(const std::string& name);
// "bool", "int", "bytes", "string"; parse_type accepts exactly these (src/runtime/names.cpp).
const char* type_name(Type t);
std::optional<Type> parse_type(const std::string& s);

// Typed getters. Unknown names are a programming error (throws kInvalidArgument);
// a malformed value throws kInvalidArgument naming the variable and the accepted form.
bool get_bool(const char* name);
int64_t get_int(const char* name);
uint64_t get_bytes(const char* name);  // accepts 4096, 64K, 8M, 1G (powers of 1024)
std::string get_string(const char* name);
// The raw value in effect (environment or default) and whether it came from the environment.
std::string value_of(const Var& v, bool* from_env = nullptr);

// Parsers shared with the CLI ("-b 8K"). Return nullopt on malformed input.
std::optional<uint64_t> parse_bytes(const std::string& s);
std::optional<bool> parse_bool(const std::string& s);
std::optional<int64_t> parse_int(const std::string& s);

}  // namespace tw::env
