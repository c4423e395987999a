// tilewire/runtime/dtype.hpp — element types tilewire ops accept.
#pragma once
#include <cstddef>
#include <optional>
#include <string>

namespace tw {

enum class DType { kFloat32, kFloat16, kBFloat16 };

inline constexpr size_t dtype_size(DType t) { return t == DType::kFloat32 ? 4 : 2; }
// Name and spellings (every public enum has such a pair: src/runtime/names.cpp). dtype_name:
// "float", "half", "bfloat16". parse_dtype accepts exactly float|fp32|float32|f32,
// half|fp16|float16|f16, bfloat16|bf16: the union of the CLI's (bf16, fp16, fp32) and Python's
// (bfloat16, float16, float32) spellings; nullopt for anything else.
const char* dtype_name(DType t);
std::optional<DType> parse_dtype(const std::string& s);

}  // namespace tw
