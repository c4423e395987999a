// tests/gpu/bad_input_test.cu — rejected calls fail loudly and write nothing.
//
// Every case expects a tw::Error with the right code and a message naming what was wrong, and
// checks that every buffer involved is byte-for-byte what it was before the call (outputs are
// poisoned first). All ranks make the same failing calls, so no rank is left in a collective.
//
//   BadInput.AllReduceRejections    null / misaligned (+8) send and recv, recv window too small,
//                                   pointers outside any window (cudaMalloc), partial overlap,
//                                   one-shot forced above the staging, unknown dtype; can_implement
//                                   gives the same verdict; a valid call afterwards still works
//   BadInput.ReduceScatterAllGatherRejections   the same kinds of mistakes for the two halves
//   BadInput.UseAfterWindowReset    a pointer into a window released with Window::reset()
//   BadInput.UseAfterAbort          every entry point after comm.abort(): kState, "aborted"
//   BadInput.WrongDevice            (2+ GPUs) calling with another device current: kState
#include <functional>

#include "common.cuh"

namespace {
using namespace tw_test;
using tw::AllReduceAlgo;
using tw::DType;
using tw::Errc;

constexpr DType kDt = DType::kBFloat16;

// Snapshots of device buffers, to prove a failed call wrote nothing.
struct Watch {
  std::vector<std::pair<const void*, size_t>> bufs;
  std::vector<Bytes> before;
  void take(cudaStream_t s) {
    before.clear();
    for (auto& [p, n] : bufs) before.push_back(to_host(p, n, s));
  }
  // "" when nothing changed since take().
  std::string changed(cudaStream_t s) const {
    TW_CUDA_CHECK(cudaStreamSynchronize(s));  // anything a failed call might have launched on s is done
    for (size_t k = 0; k < bufs.size(); ++k) {
      const Bytes now = to_host(bufs[k].first, bufs[k].second, s);
      for (size_t i = 0; i < now.size(); ++i)
        if (now[i] != before[k][i]) return "buffer " + std::to_string(k) + " changed at byte " + std::to_string(i);
    }
    return "";
  }
};

// Expects `call` to throw tw::Error(code) naming every needle, with nothing in `w` changed and
// no CUDA error left behind.
void expect_rejected(const char* what, const std::function<void()>& call, Errc code,
                     const std::vector<const char*>& needles, const Watch& w, cudaStream_t s) {
  EXPECT_TRUE(throws_tw(call, code, needles)) << what;
  EXPECT_EQ(w.changed(s), "") << what << ": a rejected call wrote";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << what;
}

TEST(BadInput, AllReduceRejections) {
  TW_SKIP_UNLESS_GPUS(1);
  tw_test::run_team([&](tw::Comm& comm) {
    const int r = comm.rank(), P = comm.nranks();
    Stream s;
    const size_t count = 4096, bytes = count * 2;           // 8 KiB of bf16
    const size_t big = tw::oneshot_max_bytes(comm) + 4096;  // one page past the staging
    tw::Window send = comm.alloc_window(bytes), recv = comm.alloc_window(bytes);
    tw::Window small = comm.alloc_window(4096);  // smaller than `bytes`, even after rounding
    tw::Window bsend = comm.alloc_window(big), brecv = comm.alloc_window(big);
    DeviceBuffer plain(bytes);
    ASSERT_LT(small.bytes(), bytes);
    fill(send.data(), kDt, count, Fill::kSmallInt, 1, r, s);
    fill(bsend.data(), kDt, big / 2, Fill::kSmallInt, 2, r, s);
    poison(recv.data(), recv.bytes(), s);
    poison(small.data(), small.bytes(), s);
    poison(brecv.data(), brecv.bytes(), s);
    poison(plain.data(), plain.bytes, s);
    Watch w;
    w.bufs = {{send.data(), send.bytes()},
              {recv.data(), recv.bytes()},
              {small.data(), small.bytes()},
              {brecv.data(), brecv.bytes()},
              {plain.data(), plain.bytes}};
    w.take(s);

    char* sp = send.as<char>();
    char* rp = recv.as<char>();
    struct Case {
      const char* what;
      tw::AllReduceArgs a;
      std::vector<const char*> needles;
    };
    const Case cases[] = {
        {"null send", {.send = nullptr, .recv = rp, .count = count}, {"send is null"}},
        {"null recv", {.send = sp, .recv = nullptr, .count = count}, {"recv is null"}},
        {"send misaligned by 8", {.send = sp + 8, .recv = rp, .count = count - 8}, {"send", "16-byte aligned"}},
        {"recv misaligned by 8", {.send = sp, .recv = rp + 8, .count = count - 8}, {"recv", "16-byte aligned"}},
        {"recv window too small", {.send = sp, .recv = small.data(), .count = count}, {"recv", "past the end"}},
        {"send outside any window",
         {.send = plain.data(), .recv = rp, .count = count},
         {"send", "not inside a window", "alloc_window"}},
        {"recv outside any window",
         {.send = sp, .recv = plain.data(), .count = count},
         {"recv", "not inside a window"}},
        {"partial overlap", {.send = rp, .recv = rp + 16, .count = count - 8}, {"overlap"}},
        {"one-shot forced above the staging",
         {.send = bsend.data(), .recv = brecv.data(), .count = big / 2, .algo = AllReduceAlgo::kOneShot},
         {"one-shot", "TILEWIRE_ONESHOT_MAX_BYTES"}},
        {"unknown dtype",
         {.send = sp, .recv = rp, .count = count, .dtype = static_cast<DType>(42)},
         {"unsupported dtype"}},
    };
    for (const Case& c : cases) {
      const tw::Status st = tw::can_implement(comm, c.a);
      EXPECT_FALSE(st.ok) << c.what << ": can_implement accepted it";
      EXPECT_NE(st.reason.find(c.needles.front()), std::string::npos) << c.what << ": " << st.reason;
      expect_rejected(
          c.what, [&] { tw::allreduce(comm, c.a, s); }, Errc::kInvalidArgument, c.needles, w, s);
    }

    // The communicator is still fine: a valid call gives the exact sum.
    comm.barrier();
    tw::allreduce(comm, tw::AllReduceArgs{sp, rp, count, kDt}, s);
    comm.sync(s);
    EXPECT_EQ(compare_exact(to_host(rp, bytes, s), exact_sum(kDt, count, 1, P), kDt, count), "")
        << "a valid all-reduce after the rejected ones, rank " << r;
    comm.barrier();
  });
}

TEST(BadInput, ReduceScatterAllGatherRejections) {
  TW_SKIP_UNLESS_GPUS(1);
  tw_test::run_team([&](tw::Comm& comm) {
    const int r = comm.rank(), P = comm.nranks();
    Stream s;
    const size_t count = 4096, bytes = count * 2;
    tw::Window win = comm.alloc_window(bytes * P);  // rs send / ag recv: count * P elements
    tw::Window small = comm.alloc_window(4096);     // too small for count * P
    DeviceBuffer local(bytes), plain(bytes * P);    // rs recv / ag send; not a window
    fill(win.data(), kDt, count * P, Fill::kSmallInt, 3, r, s);
    fill(local.data(), kDt, count, Fill::kSmallInt, 4, r, s);
    poison(small.data(), small.bytes(), s);
    poison(plain.data(), plain.bytes, s);
    Watch w;
    w.bufs = {{win.data(), win.bytes()},
              {small.data(), small.bytes()},
              {local.data(), local.bytes},
              {plain.data(), plain.bytes}};
    w.take(s);
    char* wp = win.as<char>();
    char* lp = static_cast<char*>(local.data());
    using F = std::function<void()>;
    auto rs = [&](const void* snd, void* rcv) -> F {
      return [=, &comm, &s] { tw::reduce_scatter(comm, snd, rcv, count, kDt, s); };
    };
    auto ag = [&](const void* snd, void* rcv) -> F {
      return [=, &comm, &s] { tw::all_gather(comm, snd, rcv, count, kDt, s); };
    };
    const auto inv = Errc::kInvalidArgument;
    expect_rejected("rs null send", rs(nullptr, plain.data()), inv, {"reduce_scatter", "null"}, w, s);
    expect_rejected("rs null recv", rs(wp, nullptr), inv, {"reduce_scatter", "null"}, w, s);
    expect_rejected("rs send misaligned", rs(wp + 8, plain.data()), inv, {"reduce_scatter", "16-byte"}, w, s);
    expect_rejected("rs recv misaligned", rs(wp, static_cast<char*>(plain.data()) + 8), inv, {"16-byte"}, w, s);
    expect_rejected("rs send outside any window", rs(plain.data(), lp), inv, {"send", "not inside a window"}, w, s);
    expect_rejected("rs send window too small", rs(small.data(), lp), inv, {"send", "past the end"}, w, s);
    expect_rejected("ag null send", ag(nullptr, wp), inv, {"all_gather", "null"}, w, s);
    expect_rejected("ag null recv", ag(lp, nullptr), inv, {"all_gather", "null"}, w, s);
    expect_rejected("ag recv misaligned", ag(lp, wp + 8), inv, {"all_gather", "16-byte"}, w, s);
    expect_rejected("ag recv outside any window", ag(lp, plain.data()), inv, {"recv", "not inside a window"}, w, s);
    expect_rejected("ag recv window too small", ag(lp, small.data()), inv, {"recv", "past the end"}, w, s);
    comm.barrier();
  });
}

TEST(BadInput, UseAfterWindowReset) {
  TW_SKIP_UNLESS_GPUS(1);
  tw_test::run_team([&](tw::Comm& comm) {
    Stream s;
    const size_t count = 4096;
    tw::Window send = comm.alloc_window(count * 2), recv = comm.alloc_window(count * 2);
    poison(recv.data(), recv.bytes(), s);
    void* stale = send.data();
    send.reset();  // collective: every rank releases it
    EXPECT_FALSE(send.valid());
    EXPECT_EQ(send.bytes(), 0u);
    Watch w;
    w.bufs = {{recv.data(), recv.bytes()}};
    w.take(s);
    const tw::AllReduceArgs a{stale, recv.data(), count, kDt};
    expect_rejected(
        "send released by reset()", [&] { tw::allreduce(comm, a, s); }, Errc::kInvalidArgument,
        {"send", "not inside a window"}, w, s);
    comm.barrier();
  });
}

TEST(BadInput, UseAfterAbort) {
  TW_SKIP_UNLESS_GPUS(1);
  tw_test::run_team([&](tw::Comm& comm) {
    const int r = comm.rank();
    Stream s;
    const size_t count = 4096;
    tw::Window send = comm.alloc_window(count * 2), recv = comm.alloc_window(count * 2);
    fill(send.data(), kDt, count, Fill::kSmallInt, 5, r, s);
    poison(recv.data(), recv.bytes(), s);
    comm.sync(s);
    comm.barrier();  // nobody is inside a collective when the comms go down
    comm.abort();
    EXPECT_TRUE(comm.aborted());
    Watch w;
    w.bufs = {{send.data(), send.bytes()}, {recv.data(), recv.bytes()}};
    w.take(s);
    // errors.hpp: kState is "use after destroy, wrong thread/device"; require_usable says so too.
    const tw::AllReduceArgs a{send.data(), recv.data(), count, kDt};
    expect_rejected(
        "allreduce after abort", [&] { tw::allreduce(comm, a, s); }, Errc::kState, {"aborted"}, w, s);
    expect_rejected(
        "reduce_scatter after abort",
        [&] { tw::reduce_scatter(comm, send.data(), recv.data(), count / comm.nranks(), kDt, s); }, Errc::kState,
        {"aborted"}, w, s);
    expect_rejected(
        "all_gather after abort",
        [&] { tw::all_gather(comm, send.data(), recv.data(), count / comm.nranks(), kDt, s); }, Errc::kState,
        {"aborted"}, w, s);
    expect_rejected(
        "alloc_window after abort", [&] { comm.alloc_window(4096); }, Errc::kState, {"aborted"}, w, s);
    expect_rejected(
        "barrier after abort", [&] { comm.barrier(); }, Errc::kState, {"aborted"}, w, s);
  });
}

TEST(BadInput, WrongDevice) {
  TW_SKIP_UNLESS_GPUS(2);  // a real second GPU: the current device must be another one
  const int ngpus = gpu_count();
  tw::Comm::run_local({}, [&](tw::Comm& comm) {
    Stream s;
    const size_t count = 4096;
    tw::Window send = comm.alloc_window(count * 2), recv = comm.alloc_window(count * 2);
    poison(recv.data(), recv.bytes(), s);
    Watch w;
    w.bufs = {{recv.data(), recv.bytes()}};
    w.take(s);
    const tw::AllReduceArgs a{send.data(), recv.data(), count, kDt};
    auto on_other_device = [&] {
      TW_CUDA_CHECK(cudaSetDevice((comm.device() + 1) % ngpus));
      struct Back {
        int d;
        ~Back() { cudaSetDevice(d); }
      } back{comm.device()};
      tw::allreduce(comm, a, s);
    };
    expect_rejected("allreduce with another device current", on_other_device, Errc::kState, {"cudaSetDevice"}, w, s);
    comm.barrier();
  });
}

}  // namespace
