// The spellings of the runtime's public enums (spellings.hpp): DType, Errc, env::Type.
#include <optional>
#include <string>

#include "spellings.hpp"
#include "tilewire/runtime/dtype.hpp"
#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw {
namespace {

constexpr Spelling<DType> kDType[] = {
    {"float", DType::kFloat32}, {"fp32", DType::kFloat32}, {"float32", DType::kFloat32}, {"f32", DType::kFloat32},
    {"half", DType::kFloat16},  {"fp16", DType::kFloat16}, {"float16", DType::kFloat16}, {"f16", DType::kFloat16},
    {"bfloat16", DType::kBFloat16}, {"bf16", DType::kBFloat16}};

constexpr Spelling<Errc> kErrc[] = {
    {"invalid argument", Errc::kInvalidArgument}, {"unsupported", Errc::kUnsupported},
    {"version mismatch", Errc::kVersionMismatch}, {"CUDA error", Errc::kCuda},
    {"NCCL error", Errc::kNccl},                  {"timeout", Errc::kTimeout},
    {"invalid state", Errc::kState}};

constexpr Spelling<env::Type> kEnvType[] = {
    {"bool", env::Type::kBool}, {"int", env::Type::kInt}, {"bytes", env::Type::kBytes}, {"string", env::Type::kString}};

}  // namespace


const char* dtype_name(DType t) { return name_in(kDType, t); }
std::optional<DType> parse_dtype(const std::string& s) { return parse_in(kDType, s); }

const char* errc_name(Errc e) { return name_in(kErrc, e, "error"); }
std::optional<Errc> parse_errc(const std::string& s) { return parse_in(kErrc, s); }

const char* env::type_name(env::Type t) { return name_in(kEnvType, t); }
std::optional<env::Type> env::parse_type(const std::string& s) { return parse_in(kEnvType, s); }

}  // namespace tw
