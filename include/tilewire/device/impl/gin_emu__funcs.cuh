// The emulated GIN backend's device side (DevCtx::gin_emu; a virtual team in nodes). A GIN op is
// one slot of this rank's ring in host-mapped memory: one thread claims the slot (an atomic on a
// device counter), waits while the team's proxy has not freed it (bounded), writes the op and
// publishes it by storing its sequence number last, with release at system scope. The proxy
// (src/runtime/gin_emu.cpp) delivers it with a host memcpy, in its own order, and makes a signal
// visible only after the data it covers (GinEmuOp). Reads of a GIN signal and flushes read
// host-mapped words the proxy writes.
#pragma once

namespace tw::dev {

__device__ __forceinline__ bool gin_emulated(const DevCtx& ctx) { return ctx.gin_emu.ring != nullptr; }

// The peer's copy of `off` in window `w`: a virtual team's window is one allocation of every
// rank's slice at the LSA stride, so a peer in another node lies outside this node's LSA range
// of it but in the same allocation (the emulation's transport; no kernel stores there).
__device__ __forceinline__ char* gin_emu_peer_ptr(const DevCtx& ctx, const DevWindow& w, size_t off, int peer) {
  const int node0 = ctx.rank - ctx.lsa_rank;
  return w.lsa_base + (int64_t)(peer - node0) * (int64_t)w.lsa_stride + (int64_t)off;
}

// One thread: post one op. The caller has ordered the source's writes before it (coop.sync and
// the fence below make them visible to the proxy).
__device__ inline void gin_emu_post(const DevCtx& ctx, int peer, const char* src, char* dst, size_t bytes, int signal,
                                    uint64_t value) {
  const GinEmuView& g = ctx.gin_emu;
  const unsigned long long k = atomicAdd(g.tail, 1ull);
  GinEmuOp* op = g.ring + (k % g.ring_slots);
  bounded_spin(ctx, "gin_emu.ring_slot", k + 1, [&] { return ptx::ld_acquire_sys(&op->seq); },
               [](uint64_t v) { return v == 0; });
  volatile GinEmuOp* o = op;
  o->src = reinterpret_cast<uint64_t>(src);
  o->dst = reinterpret_cast<uint64_t>(dst);
  o->bytes = bytes;
  o->value = value;
  o->peer = peer;
  o->signal = signal;
  __threadfence_system();  // the source's data and the op before the sequence number
  ptx::st_release_sys(&op->seq, k + 1);
}

// This rank's GIN part of signal `index`.
__device__ __forceinline__ uint64_t gin_emu_signal(const DevCtx& ctx, int index, bool acquire) {
  const uint64_t* p = ctx.gin_emu.signals + index;
  return acquire ? ptx::ld_acquire_sys(p) : ptx::ld_relaxed_sys(p);
}

// Every op this rank posted so far has read its source (GIN flush: the sources may be reused;
// nothing is said of their arrival).
__device__ inline void gin_emu_flush(const DevCtx& ctx) {
  const uint64_t posted = *reinterpret_cast<volatile unsigned long long*>(ctx.gin_emu.tail);
  bounded_spin(ctx, "gin_emu.flush", posted, [&] { return ptx::ld_acquire_sys(ctx.gin_emu.consumed); },
               [&](uint64_t v) { return v >= posted; });
}

}  // namespace tw::dev
