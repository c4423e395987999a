// Host-side planning for the all-reduce family: algorithm choice and argument checks that need
// no GPU (unit-tested in tests/cpu/allreduce_plan_test.cpp).
#include <cstdint>

#include "tilewire/ops/allreduce.hpp"

namespace tw {

AllReduceAlgo choose_allreduce_algo(size_t bytes, int nranks, size_t oneshot_max_bytes) {
  (void)nranks;
  return bytes <= oneshot_max_bytes ? AllReduceAlgo::kOneShot : AllReduceAlgo::kTwoShot;
}

static Status fail(std::string why) { return Status{false, std::move(why)}; }

Status check_allreduce_args(const AllReduceArgs& a, int nranks, size_t oneshot_max_bytes) {
  if (nranks < 1) return fail("communicator has no ranks");
  if (a.count == 0) return Status{};  // nothing to do, nothing written
  if (a.send == nullptr) return fail("send is null");
  if (a.recv == nullptr) return fail("recv is null");
  if (a.dtype != DType::kFloat32 && a.dtype != DType::kFloat16 && a.dtype != DType::kBFloat16)
    return fail("unsupported dtype (supported: float, half, bfloat16)");
  if (reinterpret_cast<uintptr_t>(a.send) % 16 != 0)
    return fail("send is not 16-byte aligned (tilewire moves 16-byte vectors; offset the buffer by a multiple of 16)");
  if (reinterpret_cast<uintptr_t>(a.recv) % 16 != 0)
    return fail("recv is not 16-byte aligned (tilewire moves 16-byte vectors; offset the buffer by a multiple of 16)");
  const size_t esize = dtype_size(a.dtype);
  if (a.count > SIZE_MAX / esize) return fail("count * element size overflows");
  const size_t bytes = a.count * esize;
  if (a.algo == AllReduceAlgo::kOneShot && bytes > oneshot_max_bytes)
    return fail("one-shot forced for " + std::to_string(bytes) + " bytes, above the staging size of " +
                std::to_string(oneshot_max_bytes) + " bytes (raise TILEWIRE_ONESHOT_MAX_BYTES or use two-shot)");
  if (a.send != a.recv) {
    auto s = reinterpret_cast<uintptr_t>(a.send), r = reinterpret_cast<uintptr_t>(a.recv);
    if (s < r + bytes && r < s + bytes) return fail("send and recv overlap partially (in-place needs send == recv)");
  }
  return Status{};
}

Status check_scatter_gather_args(ScatterGather op, const void* send, const void* recv, size_t count, DType dtype,
                                 int nranks, bool check_overlap) {
  const char* name = scatter_gather_name(op);
  auto bad = [&](const std::string& why) { return fail(std::string(name) + ": " + why); };
  if (nranks < 1) return bad("communicator has no ranks");
  if (count == 0) return Status{};  // nothing to do, nothing written
  if (send == nullptr || recv == nullptr) return bad("send or recv is null");
  if (dtype != DType::kFloat32 && dtype != DType::kFloat16 && dtype != DType::kBFloat16)
    return bad("unsupported dtype (supported: float, half, bfloat16)");
  if (reinterpret_cast<uintptr_t>(send) % 16 != 0 || reinterpret_cast<uintptr_t>(recv) % 16 != 0)
    return bad("send and recv must be 16-byte aligned");
  const size_t esize = dtype_size(dtype);
  if (count > SIZE_MAX / esize / (size_t)nranks)
    return bad("count " + std::to_string(count) + " x " + std::to_string(esize) + " bytes x " + std::to_string(nranks) +
               " ranks overflows the address space");
  const size_t part = count * esize, whole = part * (size_t)nranks;
  const size_t send_bytes = op == ScatterGather::kReduceScatter ? whole : part;
  const size_t recv_bytes = op == ScatterGather::kReduceScatter ? part : whole;
  const auto s = reinterpret_cast<uintptr_t>(send), r = reinterpret_cast<uintptr_t>(recv);
  if (check_overlap && s < r + recv_bytes && r < s + send_bytes)
    return bad("send [" + std::to_string(send_bytes) + " bytes] and recv [" + std::to_string(recv_bytes) +
               " bytes] overlap; it does not run in place: give recv its own buffer");
  return Status{};
}

}  // namespace tw
