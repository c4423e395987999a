// tools/bench_ep_run.cuh — the per-rank run of `tilewire bench ep` (bench_ep.cu has the design).
#pragma once

namespace tw::cli {
namespace {

// NCCL's all-to-all-v of the same rows: pack per destination (the layout's send_slot), send.
__global__ void permute(const char* x, size_t row, const uint8_t* in_rank, const int* slot, const int* off, int N, int P,
                        char* out) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N * P * (row / 16); i += (size_t)gridDim.x * blockDim.x) {
    const size_t v = i % (row / 16), td = i / (row / 16);
    const int t = (int)(td / P), d = (int)(td % P);
    if (!in_rank[td]) continue;
    reinterpret_cast<uint4*>(out + ((size_t)off[d] + slot[td]) * row)[v] = reinterpret_cast<const uint4*>(x + (size_t)t * row)[v];
  }
}
// out[t] = sum over d in rank order of back[off[d] + slot[t][d]] (fp32, rounded once).
__global__ void unpermute(const __nv_bfloat16* back, const uint8_t* in_rank, const int* slot, const int* off, int N, int P,
                          int H, __nv_bfloat16* out) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N * H; i += (size_t)gridDim.x * blockDim.x) {
    const int t = (int)(i / H), c = (int)(i % H);
    float acc = 0.0f;
    for (int d = 0; d < P; ++d)
      if (in_rank[(size_t)t * P + d]) acc += __bfloat162float(back[((size_t)off[d] + slot[(size_t)t * P + d]) * H + c]);
    out[i] = __float2bfloat16_rn(acc);
  }
}
__global__ void count_diff(const uint8_t* a, const uint8_t* b, size_t n, unsigned long long* wrong) {
  unsigned long long bad = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) bad += a[i] != b[i];
  if (bad) atomicAdd(wrong, bad);
}

// Spins for `ns` nanoseconds of %globaltimer (one thread): an idle stretch in a stream.
__global__ void idle_ns(uint64_t ns) {
  const uint64_t t0 = ptx::globaltimer();
  while (ptx::globaltimer() - t0 < ns) {
  }
}

struct Dev {  // a device allocation
  void* p = nullptr;
  explicit Dev(size_t bytes) { TW_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16))); }
  ~Dev() { cudaFree(p); }
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

class EpBench {
 public:
  EpBench(const EpOptions& o, int P) : o_(o), P_(P), barrier_(P), gen_(P, 0) { sh_.times.resize(P); }
  void run(Comm& comm);
  Shared& shared() { return sh_; }

 private:
  // Times `op` (R repeats of `iters` calls) on every rank; rank 0 fills row.med/p99/max. An op
  // that synchronizes on the host (the NCCL pipeline's counts) cannot sit behind the start gate:
  // those repeats start at a host barrier instead (`gated` false).
  template <class Op>
  void time(Comm& comm, cudaStream_t s, Row& row, Op op, bool gated = true);
  // Times `part` alone, `pre` (untimed) before each of its calls: an event before and after each
  // call of `part`, the per-call time = the sum of those intervals / iters (the events between the
  // kernels end programmatic launch's overlap at both ends of `part`: it reads high by about a
  // launch). Otherwise as time().
  template <class Pre, class Part>
  void time_part(Comm& comm, cudaStream_t s, Row& row, Pre pre, Part part);
  void finish_row(Row& row, const std::vector<double>& t, int me);
  // The NCCL pipeline on the routing of idx (layout() of `lb`, a high-throughput buffer): counts
  // exchanged (all-gather, read back), rows permuted per destination, all-to-all-v (grouped
  // send/recv); back: all-to-all-v of the received rows, unpermute (fp32 sum in rank order).
  // Compared with tilewire's received rows and combined output where given (non-null).
  // y: the bf16 rows combine sends back (at least P x tokens of them).
  void nccl_baseline(Comm& comm, cudaStream_t s, EpBuffer& lb, const void* x, size_t row, const void* idx, const void* y,
                     const void* tw_rows, size_t tw_row_bytes, const void* tw_out, Row& nd, Row& nc,
                     unsigned long long* bad);
  const EpOptions& o_;
  const int P_;
  HostBarrier barrier_;
  StartGate gate_;
  std::vector<uint32_t> gen_;  // per rank: the ranks of a team of threads share this object
  Shared sh_;
};

template <class Op>
void EpBench::time(Comm& comm, cudaStream_t s, Row& row, Op op, bool gated) {
  const int me = comm.rank();
  op();  // untimed
  TW_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaEvent_t e0, e1;
  TW_CUDA_CHECK(cudaEventCreate(&e0));
  TW_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<double> t;
  for (int r = 0; r < o_.repeats; ++r) {
    const uint32_t g = ++gen_[me];  // every rank counts the same repeats
    if (gated) gate_.hold(s, g);
    else barrier_.arrive_and_wait("bench ep repeat start");
    TW_CUDA_CHECK(cudaEventRecord(e0, s));
    for (int i = 0; i < o_.iters; ++i) op();
    TW_CUDA_CHECK(cudaEventRecord(e1, s));
    barrier_.arrive_and_wait("bench ep repeat");
    if (me == 0 && gated) gate_.open(g);
    comm.sync(s);
    float ms = 0;
    TW_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms * 1e3 / o_.iters);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  finish_row(row, t, me);
}

template <class Pre, class Part>
void EpBench::time_part(Comm& comm, cudaStream_t s, Row& row, Pre pre, Part part) {
  const int me = comm.rank();
  pre();
  part();  // untimed
  TW_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<cudaEvent_t> ev(2 * (size_t)o_.iters);
  for (cudaEvent_t& e : ev) TW_CUDA_CHECK(cudaEventCreate(&e));
  std::vector<double> t;
  for (int r = 0; r < o_.repeats; ++r) {
    const uint32_t g = ++gen_[me];
    gate_.hold(s, g);
    for (int i = 0; i < o_.iters; ++i) {
      pre();
      TW_CUDA_CHECK(cudaEventRecord(ev[2 * i], s));
      part();
      TW_CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], s));
    }
    barrier_.arrive_and_wait("bench ep repeat");
    if (me == 0) gate_.open(g);
    comm.sync(s);
    double us = 0;
    for (int i = 0; i < o_.iters; ++i) {
      float ms = 0;
      TW_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
      us += ms * 1e3;
    }
    t.push_back(us / o_.iters);
  }
  for (cudaEvent_t e : ev) cudaEventDestroy(e);
  finish_row(row, t, me);
}

void EpBench::finish_row(Row& row, const std::vector<double>& t, int me) {
  {
    std::lock_guard<std::mutex> lk(sh_.mu);
    sh_.times[me] = t;
  }
  barrier_.arrive_and_wait("bench ep times");
  if (me == 0) {
    row.ran = true;
    row.med_us = row.p99_us = row.max_us = 0;
    for (int q = 0; q < P_; ++q) {
      row.med_us = std::max(row.med_us, pct(sh_.times[q], 0.5));
      row.p99_us = std::max(row.p99_us, pct(sh_.times[q], 0.99));
      row.max_us = std::max(row.max_us, *std::max_element(sh_.times[q].begin(), sh_.times[q].end()));
    }
  }
  barrier_.arrive_and_wait("bench ep rows");
}

void EpBench::nccl_baseline(Comm& comm, cudaStream_t s, EpBuffer& lb, const void* x, size_t row, const void* idx,
                            const void* y, const void* tw_rows, size_t tw_row_bytes, const void* tw_out, Row& nd, Row& nc,
                            unsigned long long* bad) {
  const int me = comm.rank(), P = comm.nranks(), N = o_.tokens, H = o_.hidden;
  const EpLayoutView lv = lb.layout_view();
  std::vector<int> mine(P), all((size_t)P * P), off(P), roff(P);
  Dev offd(P * 4), sendb((size_t)N * P * row), recvb((size_t)P * N * row), back((size_t)N * P * H * 2),
      nout((size_t)N * H * 2);
  auto counts = [&] {
    lb.layout(idx, EpIndex::kInt64, N, s);
    TW_CUDA_CHECK(cudaMemcpyAsync(mine.data(), lv.tokens_per_rank, P * 4, cudaMemcpyDeviceToHost, s));
    TW_CUDA_CHECK(cudaStreamSynchronize(s));
    TW_CUDA_CHECK(cudaMemcpyAsync(offd.p, mine.data(), P * 4, cudaMemcpyHostToDevice, s));
    TW_NCCL_CHECK(ncclAllGather(offd.p, sendb.p, P, ncclInt32, comm.nccl(), s));
    TW_CUDA_CHECK(cudaMemcpyAsync(all.data(), sendb.p, (size_t)P * P * 4, cudaMemcpyDeviceToHost, s));
    TW_CUDA_CHECK(cudaStreamSynchronize(s));
  };
  auto dispatch = [&] {
    counts();
    int o = 0, ro = 0;
    for (int d = 0; d < P; ++d) off[d] = o, o += all[(size_t)me * P + d], roff[d] = ro, ro += all[(size_t)d * P + me];
    TW_CUDA_CHECK(cudaMemcpyAsync(offd.p, off.data(), P * 4, cudaMemcpyHostToDevice, s));
    permute<<<1024, 256, 0, s>>>(static_cast<const char*>(x), row, lv.token_in_rank, lv.send_slot, offd.as<int>(), N, P,
                                 sendb.as<char>());
    TW_NCCL_CHECK(ncclGroupStart());
    for (int d = 0; d < P; ++d) {
      TW_NCCL_CHECK(ncclSend(sendb.as<char>() + (size_t)off[d] * row, (size_t)all[(size_t)me * P + d] * row, ncclUint8, d,
                             comm.nccl(), s));
      TW_NCCL_CHECK(ncclRecv(recvb.as<char>() + (size_t)roff[d] * row, (size_t)all[(size_t)d * P + me] * row, ncclUint8, d,
                             comm.nccl(), s));
    }
    TW_NCCL_CHECK(ncclGroupEnd());
  };
  auto combine = [&] {
    const char* src = static_cast<const char*>(y);
    TW_NCCL_CHECK(ncclGroupStart());
    for (int d = 0; d < P; ++d) {
      TW_NCCL_CHECK(ncclSend(src + (size_t)roff[d] * H * 2, (size_t)all[(size_t)d * P + me] * H * 2, ncclUint8, d,
                             comm.nccl(), s));
      TW_NCCL_CHECK(ncclRecv(back.as<char>() + (size_t)off[d] * H * 2, (size_t)all[(size_t)me * P + d] * H * 2, ncclUint8,
                             d, comm.nccl(), s));
    }
    TW_NCCL_CHECK(ncclGroupEnd());
    unpermute<<<1024, 256, 0, s>>>(back.as<__nv_bfloat16>(), lv.token_in_rank, lv.send_slot, offd.as<int>(), N, P, H,
                                   nout.as<__nv_bfloat16>());
  };
  dispatch();
  if (tw_rows) count_diff<<<1024, 256, 0, s>>>(recvb.as<uint8_t>(), static_cast<const uint8_t*>(tw_rows), tw_row_bytes, bad);
  combine();
  if (tw_out) count_diff<<<1024, 256, 0, s>>>(nout.as<uint8_t>(), static_cast<const uint8_t*>(tw_out), (size_t)N * H * 2, bad);
  time(comm, s, nd, dispatch, /*gated=*/false);
  time(comm, s, nc, combine);
}

void EpBench::run(Comm& comm) {
  const int me = comm.rank(), P = comm.nranks(), N = o_.tokens, H = o_.hidden, L = o_.experts / P;
  const bool ll = o_.mode == EpMode::kLowLatency, fp8 = o_.payload == EpPayload::kFp8E4M3;
  cudaStream_t s = nullptr;
  TW_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  EpConfig cfg;
  cfg.max_tokens_per_rank = N, cfg.hidden = H, cfg.topk = o_.topk, cfg.num_experts = o_.experts;
  cfg.payload = o_.payload, cfg.mode = o_.mode, cfg.num_sms = o_.sms;
  EpBuffer buf(comm, cfg);
  if (me == 0) sh_.sms = buf.num_sms();
  const size_t row = ep_row_bytes(cfg), nsc = ep_scale_bytes(cfg) / 4;
  Dev x((size_t)N * H * 2), x8((size_t)N * H), sc((size_t)N * (H / 128) * 4 + 16), idx((size_t)N * o_.topk * 8),
      w((size_t)N * o_.topk * 4), out((size_t)N * H * 2), wrong(8);
  fill_x<<<1024, 256, 0, s>>>(x.as<__nv_bfloat16>(), N, H, me);
  if (fp8 && !ll) fill_fp8<<<1024, 256, 0, s>>>(x8.as<uint8_t>(), sc.as<float>(), N, H, me);
  const std::vector<int64_t> routing = make_routing(o_, me);
  std::vector<float> weights(routing.size());
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = 0.5f + (float)(mix(13 ^ i ^ ((uint64_t)me << 40)) % 256) / 512.0f;
  TW_CUDA_CHECK(cudaMemcpyAsync(idx.p, routing.data(), routing.size() * 8, cudaMemcpyHostToDevice, s));
  TW_CUDA_CHECK(cudaMemcpyAsync(w.p, weights.data(), weights.size() * 4, cudaMemcpyHostToDevice, s));
  TW_CUDA_CHECK(cudaMemsetAsync(wrong.p, 0, 8, s));
  const size_t ycap = ll ? (size_t)L * P * N : (size_t)P * N;
  Dev y(ycap * H * 2);
  unsigned long long* bad = wrong.as<unsigned long long>();
  Row disp{ll ? "ll dispatch (send + recv)" : "ht dispatch"}, comb{ll ? "ll combine (send + recv), y in the buffer" : "ht combine"};
  Row combc{"ll combine (send + recv), y copied in"};
  Row combe{"ll combine (send + recv), events around each"};
  Row combl2{"ll combine, events, L2 flushed after the dispatch"}, combgap{"ll combine, events, 50 us idle after the dispatch"};
  Row nd{"nccl dispatch (layout, counts, permute, all-to-all-v)"}, nc{"nccl combine (all-to-all-v, unpermute)"};
  double logical_bytes = 0, wire_bytes = 0, comb_logical = 0, comb_wire = 0;
  // The HBM floor at one rank: the bytes an op cannot avoid (its inputs read once, its outputs
  // written once) over the copy bandwidth measured below. pairs: this rank's (token, expert)
  // selections; rows_in: the rows it receives.
  double disp_floor = 0, comb_floor = 0, combc_floor = 0;
  long long pairs = 0;
  for (int64_t e : routing) pairs += e >= 0;

  if (!ll) {
    EpDispatchArgs a;
    a.x = fp8 ? x8.p : x.p, a.x_scales = fp8 ? sc.as<float>() : nullptr, a.payload = o_.payload, a.num_tokens = N;
    a.topk_idx = idx.p, a.topk_weights = w.as<float>();
    const EpRecv r = buf.dispatch(a, s);
    buf.check(s);
    const int n = buf.num_recv(s);
    check_ht_rows<<<1024, 256, 0, s>>>(r.x, r.x_scales, r.src_rank, r.src_token, r.num_recv, H, fp8, y.as<__nv_bfloat16>(), bad);
    buf.combine(y.p, nullptr, out.p, s);
    const EpLayoutView lv = buf.layout_view();
    check_ht_out<<<1024, 256, 0, s>>>(out.as<__nv_bfloat16>(), lv.token_in_rank, N, H, P, me, bad);
    // Counts: every rank's layout says how many rows this rank gets from it.
    std::vector<int> mine(P), all((size_t)P * P);
    TW_CUDA_CHECK(cudaMemcpyAsync(mine.data(), lv.tokens_per_rank, P * 4, cudaMemcpyDeviceToHost, s));
    comm.sync(s);
    comm.allgather_host(mine.data(), all.data(), P * 4);
    int expect = 0, own = all[(size_t)me * P + me];
    for (int q = 0; q < P; ++q) expect += all[(size_t)q * P + me];
    unsigned long long host_bad = expect != n;
    logical_bytes = (double)n * (row + nsc * 4);
    wire_bytes = (double)(n - own) * (row + nsc * 4 + o_.topk * 8 + 8);
    comb_logical = (double)n * H * 2;
    comb_wire = (double)(n - own) * H * 2;
    disp_floor = (double)N * (row + nsc * 4) + (double)n * (row + nsc * 4);  // x read, received rows written
    comb_floor = (double)n * H * 2 + (double)N * H * 2;                     // y read, out written
    time(comm, s, disp, [&] { buf.dispatch(a, s); });
    time(comm, s, comb, [&] { buf.combine(y.p, nullptr, out.p, s); });
    check_ht_out<<<1024, 256, 0, s>>>(out.as<__nv_bfloat16>(), lv.token_in_rank, N, H, P, me, bad);
    if (comm.nccl() != nullptr) {  // the NCCL pipeline, checked against tilewire's rows and output
      nccl_baseline(comm, s, buf, a.x, row, idx.p, y.p, r.x, (size_t)n * row, out.p, nd, nc, bad);
      buf.dispatch(a, s);  // the layout the bench's dispatch rows came from again (the NCCL path re-ran it)
    }
    TW_CUDA_CHECK(cudaStreamSynchronize(s));
    unsigned long long dev_bad = 0;
    TW_CUDA_CHECK(cudaMemcpy(&dev_bad, bad, 8, cudaMemcpyDeviceToHost));
    std::lock_guard<std::mutex> lk(sh_.mu);
    sh_.wrong += dev_bad + host_bad;
  } else {
    EpLowLatencyArgs a;
    a.x = x.p, a.num_tokens = N, a.topk_idx = idx.p;
    buf.dispatch_send(a, s);
    const EpLowLatencyRecv r = buf.dispatch_recv(s);
    buf.check(s);
    check_ll_rows<<<1024, 256, 0, s>>>(r.x, r.x_scales, r.src_rank, r.src_token, r.count, L, r.capacity, H, fp8,
                                        y.as<__nv_bfloat16>(), bad);
    // The expert's output in the combine block (as an expert GEMM would write it): every later
    // dispatch of the same routing receives the same rows, so it stays right for the timing.
    TW_CUDA_CHECK(cudaMemcpyAsync(r.y, y.p, (size_t)L * r.capacity * H * 2, cudaMemcpyDeviceToDevice, s));
    buf.combine_send(r.y, s);
    buf.combine_recv(w.as<float>(), out.p, s);
    check_ll_out<<<1024, 256, 0, s>>>(out.as<__nv_bfloat16>(), idx.as<int64_t>(), w.as<float>(), N, H, o_.topk, me, bad);
    std::vector<int> cnt(L);
    TW_CUDA_CHECK(cudaMemcpyAsync(cnt.data(), r.count, L * 4, cudaMemcpyDeviceToHost, s));
    comm.sync(s);
    long long rows = 0;
    for (int c : cnt) rows += c;
    long long own = 0;  // this rank's selections of its own experts
    for (int64_t e : routing) own += e >= 0 && e / L == me;
    logical_bytes = (double)rows * (row + nsc * 4);
    wire_bytes = (double)(rows - own) * (row + nsc * 4 + 8);  // + the row's source rank and token
    comb_logical = (double)rows * H * 2;
    comb_wire = (double)(rows - own) * H * 2;
    disp_floor = (double)N * H * 2 + (double)pairs * (row + nsc * 4);  // x read once, a row per pair written
    comb_floor = (double)pairs * H * 2 + (double)N * H * 2;            // a y row per pair read, out written
    combc_floor = comb_floor + 2.0 * rows * H * 2;                      // + y read and written into the buffer
    time(comm, s, disp, [&] {
      buf.dispatch_send(a, s);
      buf.dispatch_recv(s);
    });
    for (const bool copied : {false, true}) {
      Row& c = copied ? combc : comb;
      time(comm, s, c, [&] {
        buf.dispatch_send(a, s);  // combine needs a fresh receive; the row is the pair minus the dispatch row
        buf.dispatch_recv(s);
        buf.combine_send(copied ? y.p : r.y, s);
        buf.combine_recv(w.as<float>(), out.p, s);
      });
      if (me == 0) {
        c.med_us = std::max(0.0, c.med_us - disp.med_us);
        c.p99_us = std::max(0.0, c.p99_us - disp.med_us);
        c.max_us = std::max(0.0, c.max_us - disp.med_us);
      }
      check_ll_out<<<1024, 256, 0, s>>>(out.as<__nv_bfloat16>(), idx.as<int64_t>(), w.as<float>(), N, H, o_.topk, me, bad);
    }
    // The combine again, timed by events around it instead of as the pair minus the dispatch: the
    // pair rule charges combine with any change in the dispatch's time after a combine (the
    // dispatch row runs after a dispatch).
    time_part(
        comm, s, combe,
        [&] {
          buf.dispatch_send(a, s);
          buf.dispatch_recv(s);
        },
        [&] {
          buf.combine_send(r.y, s);
          buf.combine_recv(w.as<float>(), out.p, s);
        });
    check_ll_out<<<1024, 256, 0, s>>>(out.as<__nv_bfloat16>(), idx.as<int64_t>(), w.as<float>(), N, H, o_.topk, me, bad);
    if (o_.combine_probes) {  // what the combine owes to the L2 and the writes the dispatch leaves behind
      auto probes = [&] {
        Dev flush(size_t(256) << 20);
        for (const bool l2 : {true, false}) {
          time_part(
              comm, s, l2 ? combl2 : combgap,
              [&] {
                buf.dispatch_send(a, s);
                buf.dispatch_recv(s);
                if (l2) TW_CUDA_CHECK(cudaMemsetAsync(flush.p, 0x5a, size_t(256) << 20, s));
                else idle_ns<<<1, 1, 0, s>>>(50000);
              },
              [&] {
                buf.combine_send(r.y, s);
                buf.combine_recv(w.as<float>(), out.p, s);
              });
          check_ll_out<<<1024, 256, 0, s>>>(out.as<__nv_bfloat16>(), idx.as<int64_t>(), w.as<float>(), N, H, o_.topk, me, bad);
        }
      };
      probes();
      // flush's cudaFree waits for the whole device: on a virtual team no rank may launch a kernel
      // that waits for a peer (the trace's clock probe) before every rank is past it.
      barrier_.arrive_and_wait("bench ep combine probes freed");
    }
    if (comm.nccl() != nullptr) {
      // The same tokens through NCCL, a row per (token, destination rank) as a host-sized
      // all-to-all-v moves them (the routing from a high-throughput buffer's layout); its rows
      // are in another order than the expert-major ones, so only timed.
      EpConfig hc = cfg;
      hc.mode = EpMode::kHighThroughput;
      EpBuffer lb(comm, hc);
      nccl_baseline(comm, s, lb, x.p, row, idx.p, y.p, nullptr, 0, nullptr, nd, nc, bad);
    }
    TW_CUDA_CHECK(cudaStreamSynchronize(s));
    unsigned long long dev_bad = 0;
    TW_CUDA_CHECK(cudaMemcpy(&dev_bad, bad, 8, cudaMemcpyDeviceToHost));
    std::lock_guard<std::mutex> lk(sh_.mu);
    sh_.wrong += dev_bad;
  }
  // One traced dispatch + combine (after the timing: its events must not include the warm-up).
  if (!o_.trace_path.empty()) {
    const trace::ClockSync cs = trace::measure_clock_offsets(comm);
    trace::TraceBuffer tb(1 << 14);
    tb.reset(s);
    buf.set_trace(tb.ring(me));
    // No rank launches before every rank is past the setup: measure_clock_offsets frees device
    // memory on its way out, and cudaFree waits for the whole device, so on a virtual team a rank
    // still freeing waited for a peer's traced dispatch that spun for it (the high-throughput
    // trace at 8 virtual ranks timed out in 'ep.dispatch.counts').
    barrier_.arrive_and_wait("bench ep trace setup");
    if (ll) {
      EpLowLatencyArgs a;
      a.x = x.p, a.num_tokens = N, a.topk_idx = idx.p;
      buf.dispatch_send(a, s);
      const EpLowLatencyRecv r = buf.dispatch_recv(s);
      buf.combine_send(r.y, s);
      buf.combine_recv(w.as<float>(), out.p, s);
    } else {
      EpDispatchArgs a;
      a.x = fp8 ? x8.p : x.p, a.x_scales = fp8 ? sc.as<float>() : nullptr, a.payload = o_.payload, a.num_tokens = N;
      a.topk_idx = idx.p, a.topk_weights = w.as<float>();
      buf.dispatch(a, s);
      buf.combine(y.p, nullptr, out.p, s);
    }
    buf.set_trace(trace::Ring{});
    comm.sync(s);
    const trace::Trace t = trace::gather_trace(comm, tb, cs, s);
    if (me == 0) {
      trace::save_trace_file(o_.trace_path, t);
      sh_.timeline = format_ep_timeline(ep_timeline(t.align(), P_));
    }
  }
  // Bandwidth: this rank's bytes over the slowest rank's median (rank 0 reports).
  if (me == 0) {
    disp.logical_gbps = disp.med_us > 0 ? logical_bytes / disp.med_us / 1e3 : 0;
    disp.wire_gbps = disp.med_us > 0 ? wire_bytes / disp.med_us / 1e3 : 0;
    comb.logical_gbps = comb.med_us > 0 ? comb_logical / comb.med_us / 1e3 : 0;
    comb.wire_gbps = comb.med_us > 0 ? comb_wire / comb.med_us / 1e3 : 0;
    nd.logical_gbps = nd.med_us > 0 ? logical_bytes / nd.med_us / 1e3 : 0;
    nc.logical_gbps = nc.med_us > 0 ? comb_logical / nc.med_us / 1e3 : 0;
    combc.logical_gbps = combc.med_us > 0 ? comb_logical / combc.med_us / 1e3 : 0;
    combc.wire_gbps = combc.med_us > 0 ? comb_wire / combc.med_us / 1e3 : 0;
    // Per token and per selected (token, expert) of this rank; the floor at one real rank.
    const bool one_rank = P == 1 && !comm.is_virtual();
    double hbm_gbps = 0;
    if (one_rank) {  // HBM copy bandwidth, this run: bytes read + written per second by cudaMemcpyAsync
      const size_t bytes = size_t(1) << 30;
      Dev a(bytes), b(bytes);
      cudaEvent_t e0, e1;
      TW_CUDA_CHECK(cudaEventCreate(&e0));
      TW_CUDA_CHECK(cudaEventCreate(&e1));
      std::vector<double> ts;
      for (int i = 0; i < 6; ++i) {
        TW_CUDA_CHECK(cudaEventRecord(e0, s));
        TW_CUDA_CHECK(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, s));
        TW_CUDA_CHECK(cudaEventRecord(e1, s));
        TW_CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        TW_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (i > 0) ts.push_back(ms);
      }
      cudaEventDestroy(e0), cudaEventDestroy(e1);
      hbm_gbps = 2.0 * bytes / (pct(ts, 0.5) * 1e-3) / 1e9;
    }
    for (Row* x : {&disp, &comb, &combc, &combe, &combl2, &combgap, &nd, &nc}) {
      x->per_token_us = N > 0 ? x->med_us / N : 0;
      x->per_pair_us = pairs > 0 ? x->med_us / pairs : 0;
    }
    if (one_rank && hbm_gbps > 0) {
      disp.floor_us = nd.floor_us = disp_floor / hbm_gbps / 1e3;
      comb.floor_us = combe.floor_us = combl2.floor_us = combgap.floor_us = nc.floor_us = comb_floor / hbm_gbps / 1e3;
      combc.floor_us = combc_floor / hbm_gbps / 1e3;
    }
    std::lock_guard<std::mutex> lk(sh_.mu);
    sh_.hbm_gbps = hbm_gbps;
    for (Row* x : {&combe, &combl2, &combgap}) {
      x->logical_gbps = x->med_us > 0 ? comb_logical / x->med_us / 1e3 : 0;
      x->wire_gbps = x->med_us > 0 ? comb_wire / x->med_us / 1e3 : 0;
    }
    sh_.rows = ll ? std::vector<Row>{disp, comb, combc, combe, nd, nc} : std::vector<Row>{disp, comb, nd, nc};
    if (ll && o_.combine_probes) sh_.rows.insert(sh_.rows.begin() + 4, {combl2, combgap});
  }
  // The ceiling: every SM of each rank stores 256 MiB into the next rank's window.
  if (P > 1 && !comm.is_virtual()) {
    const size_t bytes = size_t(256) << 20;
    Window cw = comm.alloc_window(bytes);
    Row ceil_row{"ceiling"};
    time(comm, s, ceil_row, [&] { store_to_peer<<<comm.sm_count() * 2, 512, 0, s>>>(comm.dev_ctx(), cw.dev(), bytes); });
    if (me == 0) sh_.ceiling_gbps = bytes / ceil_row.med_us / 1e3;
    comm.barrier();
  }
  comm.sync(s);
  comm.barrier();
  cudaStreamDestroy(s);
}

}  // namespace

int bench_ep(const std::vector<std::string>& argv) {
  const EpOptions o = parse(argv);
  if (o.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  int ngpu = 0;
  TW_REQUIRE(cudaGetDeviceCount(&ngpu) == cudaSuccess && ngpu > 0, kUnsupported, "bench ep: no CUDA GPU");
  const int P = o.virtual_ranks > 0 ? o.virtual_ranks : ngpu;
  std::ofstream json;
  if (!o.json_path.empty()) {
    json.open(o.json_path, std::ios::out | std::ios::trunc);
    TW_REQUIRE(json.good(), kInvalidArgument, "--json " + o.json_path + ": cannot open for writing");
  }
  EpBench bench(o, P);
  auto body = [&](Comm& comm) { bench.run(comm); };
  TW_REQUIRE(o.ranks_per_node == 0 || o.virtual_ranks > 0, kInvalidArgument,
             "bench ep: --ranks-per-node needs --virtual P (virtual nodes on one GPU)");
  CommConfig cc;
  cc.ranks_per_node = o.ranks_per_node;
  if (o.virtual_ranks > 0) Comm::run_virtual(0, P, body, cc);
  else Comm::run_local({}, body);
  Shared& sh = bench.shared();
  const char* mode = ep_mode_name(o.mode);
  const char* pay = ep_payload_name(o.payload);
  if (o.ranks_per_node > 0)
    std::printf("# virtual nodes: %d x %d (nodes x ranks per node), other nodes through the emulated GIN\n",
                P / o.ranks_per_node, o.ranks_per_node);
  std::printf("# tilewire bench ep: %d %s ranks, mode %s, %d tokens/rank, hidden %d, top-%d of %d experts, %s routing, %s, %d SMs\n",
              P, o.virtual_ranks > 0 ? "virtual (one GPU: correctness only)" : "GPU", mode, o.tokens, o.hidden, o.topk,
              o.experts, o.skewed ? "skewed" : "uniform", pay, sh.sms);
  std::printf("# times: per call, median / p99 / max over %d repeats of %d calls, slowest rank; logical GB/s: rows received incl.\n"
              "#   the own rank x payload bytes (DeepEP's convention); wire GB/s: rows from other ranks x the bytes that cross\n"
              "#   NVLink; ceiling: %s\n",
              o.repeats, o.iters, sh.ceiling_gbps > 0 ? (std::to_string(sh.ceiling_gbps) + " GB/s (stores into the next rank, same run)").c_str() : "n/a");
  std::printf("# us/token, us/pair: the median over this rank's tokens and its (token, expert) selections; floor: the\n"
              "#   op's unavoidable bytes (inputs read once, outputs written once) at the HBM copy bandwidth %s\n",
              sh.hbm_gbps > 0 ? ("measured in this run, " + std::to_string((int)sh.hbm_gbps) + " GB/s").c_str()
                              : "(one real rank only: n/a)");
  std::printf("# %-52s %10s %10s %10s %10s %10s %8s %9s %9s %9s %7s\n", "op", "med(us)", "p99(us)", "max(us)", "logical",
              "wire", "%ceil", "us/token", "us/pair", "floor(us)", "%floor");
  for (const Row& r : sh.rows) {
    if (!r.ran) {
      std::printf("  %-52s %10s\n", r.what.c_str(), "n/a");
      continue;
    }
    std::printf("  %-52s %10.2f %10.2f %10.2f %10.1f %10.1f %8.1f %9.4f %9.5f %9.2f %7.1f\n", r.what.c_str(), r.med_us, r.p99_us,
                r.max_us, r.logical_gbps, r.wire_gbps, sh.ceiling_gbps > 0 ? 100.0 * r.wire_gbps / sh.ceiling_gbps : 0.0,
                r.per_token_us, r.per_pair_us, r.floor_us, r.floor_us > 0 && r.med_us > 0 ? 100.0 * r.floor_us / r.med_us : 0.0);
  }
  if (!sh.timeline.empty()) std::printf("%s", sh.timeline.c_str());
  std::printf("# #wrong %llu%s\n", sh.wrong, sh.wrong ? "  <-- WRONG RESULTS" : "");
  if (json.is_open()) {
    json << "{\"bench\": \"ep\", \"ranks\": " << P << ", \"virtual\": " << (o.virtual_ranks > 0 ? "true" : "false")
         << ", \"ranks_per_node\": " << (o.ranks_per_node > 0 ? o.ranks_per_node : P) << ", \"mode\": \""
         << mode << "\", \"payload\": \"" << pay << "\", \"tokens\": " << o.tokens << ", \"hidden\": " << o.hidden
         << ", \"topk\": " << o.topk << ", \"experts\": " << o.experts << ", \"routing\": \"" << (o.skewed ? "skewed" : "uniform")
         << "\", \"sms\": " << sh.sms << ", \"ceiling_gbps\": " << sh.ceiling_gbps << ", \"hbm_gbps\": " << sh.hbm_gbps
         << ", \"wrong\": " << sh.wrong << ", \"rows\": [";
    for (size_t i = 0; i < sh.rows.size(); ++i) {
      const Row& r = sh.rows[i];
      json << (i ? ", " : "") << "{\"op\": \"" << r.what << "\", \"ran\": " << (r.ran ? "true" : "false") << ", \"median_us\": " << r.med_us
           << ", \"p99_us\": " << r.p99_us << ", \"max_us\": " << r.max_us << ", \"logical_gbps\": " << r.logical_gbps
           << ", \"wire_gbps\": " << r.wire_gbps << ", \"us_per_token\": " << r.per_token_us
           << ", \"us_per_pair\": " << r.per_pair_us << ", \"floor_us\": " << r.floor_us << "}";
    }
    json << "]}\n";
  }
  return sh.wrong == 0 ? 0 : 1;
}

}  // namespace tw::cli
