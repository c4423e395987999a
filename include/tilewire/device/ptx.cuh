// tilewire/device/ptx.cuh — every line of inline PTX in tilewire lives here.
//
// Each wrapper names its memory semantics and scope in its name. Nothing here is a public
// contract; use the primitives in peer/signal/barrier/put.cuh.
//
// The proxy rule (PTX memory model): TMA and bulk copies (cp.async.bulk, cp.async.bulk.tensor)
// access memory through the async proxy, plain loads, stores and flag atomics through the
// generic proxy, and ordering established in one proxy does not carry over to the other by
// itself. So:
//   * generic writes, then a bulk copy reads them:   fence.proxy.async (the writer, before the
//     barrier or flag that hands the data over; for shared memory CUTLASS's tma_store_fence());
//   * a bulk copy writes, then a flag publishes it:  wait for the copy's writes, then
//     fence.proxy.async, then the release (bulk_wait_all_writes());
//   * a flag acquired, then a bulk copy reads what it guards: fence.proxy.async after the
//     acquire, by every thread that issues the copy (fence_proxy_async_global()).
// Every such site in tilewire goes through these wrappers.
#pragma once
#include <cstdint>

namespace tw::ptx {

// Nanoseconds since an arbitrary epoch, shared by all SMs of a GPU (coarse: ~1 us ticks on
// some parts, 32 ns on Hopper).
__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The SM this thread runs on (trace records).
__device__ __forceinline__ uint32_t smid() {
  uint32_t s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

// 16-byte volatile (L1-bypassing, not reordered with other volatile accesses) load/store.
// Used for LL lines whose flags travel with their data.
__device__ __forceinline__ uint4 ld_volatile_v4(const void* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_volatile_v4(void* p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};"
               :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

// 16-byte relaxed loads that skip L1: for peer memory read through LSA pointers.
__device__ __forceinline__ uint4 ld_relaxed_sys_v4(const void* p) {
  uint4 v;
  asm volatile("ld.relaxed.sys.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
// 16-byte load cached in L2 only (not L1): sees data this kernel wrote earlier from other CTAs
// once ordered by a barrier/acquire.
__device__ __forceinline__ uint4 ld_cg_v4(const void* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}
// 16-byte read-only load for data that does not change while the kernel runs.
__device__ __forceinline__ uint4 ld_nc_v4(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
// 16-byte store that does not allocate in L1 (streams to L2 / NVLink).
__device__ __forceinline__ void st_v4(void* p, uint4 v) {
  asm volatile("st.global.L1::no_allocate.v4.u32 [%0], {%1,%2,%3,%4};"
               :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

// 64-bit flags at system scope (cross-GPU).
__device__ __forceinline__ uint64_t ld_acquire_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t ld_relaxed_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_sys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void st_relaxed_sys(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void red_add_release_sys(uint64_t* p, uint64_t v) {
  asm volatile("red.release.sys.global.add.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void red_add_relaxed_sys(uint64_t* p, uint64_t v) {
  asm volatile("red.relaxed.sys.global.add.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}
// 32-bit flags at system scope (the LSA barrier's inbox slots).
__device__ __forceinline__ uint32_t ld_acquire_sys_u32(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t ld_relaxed_sys_u32(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_sys_u32(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_relaxed_sys_u32(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.sys.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void fence_acq_rel_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }

// Bulk (TMA) copies shared -> global issued by this thread: wait until all of them have
// completed their writes (not only their reads of shared memory), then order those async-proxy
// writes before this thread's later generic-proxy accesses (a release flag that publishes them).
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_all_writes() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  fence_proxy_async_global();
}

// Programmatic dependent launch (sm_90): wait until the preceding kernel in the stream has
// completed and its memory is visible; let the next kernel in the stream launch early.
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void griddep_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" :::); }

__device__ __forceinline__ void nanosleep(uint32_t ns) { asm volatile("nanosleep.u32 %0;" :: "r"(ns)); }

}  // namespace tw::ptx
