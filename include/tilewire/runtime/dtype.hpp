// tilewire/runtime/dtype.hpp — element types tilewire ops accept.
#pragma once
#include <cstddef>
#include <optional>
#include <string>

namespace tw {

enum class DType { kFloat32, kFloat16, kBFloat16 };

inline constexpr size_t dtype_size(DType t) { return t == DType::kFloat32 ? 4 : 2; }
const char* dtype_name(DType t);                          // "float", "half", "bfloat16"
std::optional<DType> parse_dtype(const std::string& s);   // float|fp32|half|fp16|bfloat16|bf16

}  // namespace tw
