// tilewire._C ops: every op takes device pointers and the CUDA stream as integers (the Python
// layer passes tensor.data_ptr() and torch.cuda.current_stream().cuda_stream), and releases the
// GIL while it enqueues (a virtual team's ranks are threads; an op may wait for peers' launches).
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "bindings.hpp"
#include "tilewire/ops/allreduce.hpp"
#include "tilewire/ops/ep.hpp"
#include "tilewire/ops/gemm.hpp"
#include "tilewire/ops/gemm_allreduce.hpp"
#include "tilewire/ops/gemm_scatter_gather.hpp"
#include "tilewire/runtime/errors.hpp"

namespace nb = nanobind;

namespace tw_py {
namespace {

// An enum argument `arg` = `s`, read by the library's tw::parse_* function; else kInvalidArgument
// (a ValueError in Python) naming the argument, the value and `accepted`.
template <class E>
E enum_arg(const char* arg, const std::string& s, std::optional<E> (*parse)(const std::string&), const char* accepted) {
  const std::optional<E> e = parse(s);
  TW_REQUIRE(e.has_value(), kInvalidArgument, std::string(arg) + " '" + s + "' is not " + accepted);
  return *e;
}
tw::DType dtype_of(const std::string& s) { return enum_arg("dtype", s, tw::parse_dtype, "one of bfloat16, float16, float32"); }
tw::BLayout layout_of(const std::string& s) {
  return enum_arg("b_layout", s, tw::parse_blayout, "'nk' ([N, K]) or 'kn' ([K, N])");
}
tw::AllReduceAlgo algo_of(const std::string& s) { return enum_arg("algo", s, tw::parse_algo, "one of auto, oneshot, twoshot"); }
tw::GemmAllReduceConfig fused_config(const std::string& path, const std::string& algo, const std::string& partials) {
  tw::GemmAllReduceConfig c;
  c.path = enum_arg("path", path, tw::parse_gemm_allreduce_path, "one of auto, fused, sequential");
  c.algo = enum_arg("algo", algo, tw::parse_gemm_allreduce_algo, "one of auto, relay, exchange, owner");
  c.partials = enum_arg("partials", partials, tw::parse_partial_precision, "bfloat16 or float32");
  return c;
}
tw::EpPayload payload_of(const std::string& s) { return enum_arg("payload", s, tw::parse_ep_payload, "bfloat16 or fp8"); }

struct PyEp {
  std::unique_ptr<tw::EpBuffer> buf;
  // Garbage-collected without close(): releasing its window is collective and peers drop theirs
  // at other times, so the buffer is left alone (the communicator's close() releases the window).
  ~PyEp() {
    if (!buf) return;
    std::fprintf(stderr, "tilewire: an EpBuffer was garbage-collected without close(); its memory stays until the "
                         "communicator is closed\n");
    (void)buf.release();
  }
};

nb::dict recv_dict(const tw::EpRecv& r) {
  nb::dict d;
  d["x"] = (uintptr_t)r.x, d["x_scales"] = (uintptr_t)r.x_scales, d["topk_idx"] = (uintptr_t)r.topk_idx;
  d["topk_weights"] = (uintptr_t)r.topk_weights, d["src_rank"] = (uintptr_t)r.src_rank, d["src_token"] = (uintptr_t)r.src_token;
  d["num_recv"] = (uintptr_t)r.num_recv, d["tokens_per_expert"] = (uintptr_t)r.tokens_per_expert, d["capacity"] = r.capacity;
  return d;
}
nb::dict ll_dict(const tw::EpLowLatencyRecv& r) {
  nb::dict d;
  d["x"] = (uintptr_t)r.x, d["x_scales"] = (uintptr_t)r.x_scales, d["count"] = (uintptr_t)r.count;
  d["src_rank"] = (uintptr_t)r.src_rank, d["src_token"] = (uintptr_t)r.src_token, d["capacity"] = r.capacity;
  d["y"] = (uintptr_t)r.y;
  return d;
}

}  // namespace

void bind_ops(nb::module_& m) {
  m.def("allreduce",
        [](PyComm& c, uintptr_t send, uintptr_t recv, size_t count, const std::string& dtype, const std::string& algo,
           uintptr_t stream) {
          const tw::AllReduceArgs a{ptr<const void>(send), ptr(recv), count, dtype_of(dtype), algo_of(algo)};
          nb::gil_scoped_release unlocked;
          tw::allreduce(c.get(), a, stream_of(stream));
        });
  m.def("reduce_scatter", [](PyComm& c, uintptr_t send, uintptr_t recv, size_t recv_count, const std::string& dtype,
                             uintptr_t stream) {
    nb::gil_scoped_release unlocked;
    tw::reduce_scatter(c.get(), ptr<const void>(send), ptr(recv), recv_count, dtype_of(dtype), stream_of(stream));
  });
  m.def("all_gather", [](PyComm& c, uintptr_t send, uintptr_t recv, size_t send_count, const std::string& dtype,
                         uintptr_t stream) {
    nb::gil_scoped_release unlocked;
    tw::all_gather(c.get(), ptr<const void>(send), ptr(recv), send_count, dtype_of(dtype), stream_of(stream));
  });
  m.def("gemm", [](uintptr_t A, uintptr_t B, uintptr_t C, int M, int N, int K, const std::string& dtype,
                   const std::string& b_layout, uintptr_t stream) {
    const tw::GemmArgs a{ptr<const void>(A), ptr<const void>(B), ptr(C), M, N, K, dtype_of(dtype), layout_of(b_layout)};
    nb::gil_scoped_release unlocked;
    tw::gemm(a, tw::GemmConfig{}, stream_of(stream));
  });
  m.def("gemm_allreduce_workspace_size",
        [](int M, int N, int K, const std::string& dtype, const std::string& b_layout, int nranks, const std::string& path,
           const std::string& algo, const std::string& partials) {
          const tw::GemmAllReduceArgs a{nullptr, nullptr, nullptr, M, N, K, dtype_of(dtype), layout_of(b_layout), nullptr};
          return tw::workspace_size(a, nranks, fused_config(path, algo, partials));
        });
  m.def("gemm_allreduce",
        [](PyComm& c, uintptr_t A, uintptr_t B, uintptr_t C, int M, int N, int K, const std::string& dtype,
           const std::string& b_layout, uintptr_t workspace, const std::string& path, const std::string& algo,
           const std::string& partials, uintptr_t stream) {
          const tw::GemmAllReduceArgs a{ptr<const void>(A), ptr<const void>(B), ptr(C), M, N, K, dtype_of(dtype),
                                        layout_of(b_layout), ptr(workspace)};
          const tw::GemmAllReduceConfig cfg = fused_config(path, algo, partials);
          nb::gil_scoped_release unlocked;
          tw::gemm_allreduce(c.get(), a, cfg, stream_of(stream));
        });
  // Measurement only (Comm._time_gemm_allreduce checks the tensors as gemm_allreduce does; used by
  // scripts/py_gemm_allreduce_time.py): `iters` calls of tw::gemm_allreduce in a C++ loop, the
  // inputs alternating between (A0, B0) and (A1, B1), between two events on the stream; returns
  // us per call. Timed in the same process as comm.gemm_allreduce, in turn with it, so that both
  // see the same GPU state (clocks under the power limit move more than the difference measured
  // between processes).
  m.def("_time_gemm_allreduce",
        [](PyComm& c, uintptr_t A0, uintptr_t B0, uintptr_t A1, uintptr_t B1, uintptr_t C, int M, int N, int K,
           const std::string& dtype, const std::string& b_layout, uintptr_t workspace, const std::string& path,
           const std::string& algo, const std::string& partials, uintptr_t stream, int iters) {
          TW_REQUIRE(iters > 0, kInvalidArgument, "iters must be > 0");
          const tw::GemmAllReduceArgs a0{ptr<const void>(A0), ptr<const void>(B0), ptr(C), M, N, K, dtype_of(dtype),
                                         layout_of(b_layout), ptr(workspace)};
          tw::GemmAllReduceArgs a1 = a0;
          a1.A = ptr<const void>(A1), a1.B = ptr<const void>(B1);
          const tw::GemmAllReduceConfig cfg = fused_config(path, algo, partials);
          const cudaStream_t s = stream_of(stream);
          nb::gil_scoped_release unlocked;
          struct Events {
            cudaEvent_t e[2] = {nullptr, nullptr};
            ~Events() {
              for (cudaEvent_t x : e)
                if (x) cudaEventDestroy(x);
            }
          } ev;
          TW_CUDA_CHECK(cudaEventCreate(&ev.e[0]));
          TW_CUDA_CHECK(cudaEventCreate(&ev.e[1]));
          TW_CUDA_CHECK(cudaEventRecord(ev.e[0], s));
          for (int i = 0; i < iters; ++i) tw::gemm_allreduce(c.get(), i % 2 ? a1 : a0, cfg, s);
          TW_CUDA_CHECK(cudaEventRecord(ev.e[1], s));
          TW_CUDA_CHECK(cudaEventSynchronize(ev.e[1]));
          float ms = 0;
          TW_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.e[0], ev.e[1]));
          return (double)ms * 1e3 / iters;
        });

  // Sequence parallelism (tilewire/ops/gemm_scatter_gather.hpp); path: auto | sequential | fused.
  const auto tp_config = [](const std::string& path, int reserved_sms) {
    tw::TpConfig cfg;
    cfg.path = enum_arg("path", path, tw::parse_tp_path, "auto, sequential or fused");
    cfg.reserved_sms = reserved_sms;
    return cfg;
  };
  m.def("shard_rows", [](int M, int P) { return tw::shard_rows(M, P); });
  m.def("shard_rows_of", [](int M, int P, int r) { return tw::shard_rows_of(M, P, r); });
  m.def("gemm_reducescatter_workspace_size", [](int M, int N, const std::string& dtype, int P) {
    return tw::gemm_reducescatter_workspace_size(M, N, dtype_of(dtype), P);
  });
  m.def("allgather_gemm_workspace_size", [](int M, int K, const std::string& dtype, int P) {
    return tw::allgather_gemm_workspace_size(M, K, dtype_of(dtype), P);
  });
  m.def("gemm_reducescatter",
        [tp_config](PyComm& c, uintptr_t A, uintptr_t B, uintptr_t C, int M, int N, int K, const std::string& dtype,
                    const std::string& b_layout, uintptr_t workspace, const std::string& path, uintptr_t stream) {
          const tw::GemmReduceScatterArgs a{ptr<const void>(A), ptr<const void>(B), ptr(C), M, N, K, dtype_of(dtype),
                                            layout_of(b_layout), ptr(workspace)};
          const tw::TpConfig cfg = tp_config(path, 0);
          nb::gil_scoped_release unlocked;
          tw::gemm_reducescatter(c.get(), a, cfg, stream_of(stream));
        });
  m.def("allgather_gemm",
        [tp_config](PyComm& c, uintptr_t A_shard, uintptr_t B, uintptr_t C, uintptr_t A_gathered, int M, int N, int K,
                    const std::string& dtype, const std::string& b_layout, uintptr_t workspace, const std::string& path,
                    uintptr_t stream) {
          const tw::AllGatherGemmArgs a{ptr<const void>(A_shard), ptr<const void>(B), ptr(C), ptr(A_gathered), M, N, K,
                                        dtype_of(dtype), layout_of(b_layout), ptr(workspace)};
          const tw::TpConfig cfg = tp_config(path, 0);
          nb::gil_scoped_release unlocked;
          tw::allgather_gemm(c.get(), a, cfg, stream_of(stream));
        });

  nb::class_<PyEp>(m, "EpBuffer")
      .def("__init__",
           [](PyEp* self, PyComm& c, int max_tokens_per_rank, int hidden, int topk, int num_experts, const std::string& payload,
              bool low_latency, int num_sms, int expert_alignment) {
             tw::EpConfig cfg;
             cfg.max_tokens_per_rank = max_tokens_per_rank, cfg.hidden = hidden, cfg.topk = topk, cfg.num_experts = num_experts;
             cfg.payload = payload_of(payload), cfg.mode = low_latency ? tw::EpMode::kLowLatency : tw::EpMode::kHighThroughput;
             cfg.num_sms = num_sms, cfg.expert_alignment = expert_alignment;
             new (self) PyEp();
             nb::gil_scoped_release unlocked;
             self->buf = std::make_unique<tw::EpBuffer>(c.get(), cfg);
           },
           nb::arg("comm"), nb::arg("max_tokens_per_rank"), nb::arg("hidden"), nb::arg("topk"), nb::arg("num_experts"),
           nb::arg("payload") = "bfloat16", nb::arg("low_latency") = false, nb::arg("num_sms") = 0,
           nb::arg("expert_alignment") = 1)
      .def_prop_ro("bytes", [](const PyEp& e) { return e.buf->bytes(); })
      .def("dispatch",
           [](PyEp& e, uintptr_t x, uintptr_t x_scales, const std::string& payload, int num_tokens, uintptr_t topk_idx,
              bool idx64, uintptr_t topk_weights, bool reuse_layout, uintptr_t stream) {
             tw::EpDispatchArgs a;
             a.x = ptr<const void>(x), a.x_scales = ptr<const float>(x_scales), a.payload = payload_of(payload);
             a.num_tokens = num_tokens, a.topk_idx = ptr<const void>(topk_idx);
             a.index_type = idx64 ? tw::EpIndex::kInt64 : tw::EpIndex::kInt32;
             a.topk_weights = ptr<const float>(topk_weights), a.reuse_layout = reuse_layout;
             tw::EpRecv r;
             {
               nb::gil_scoped_release unlocked;
               r = e.buf->dispatch(a, stream_of(stream));
             }
             return recv_dict(r);
           })
      .def("combine", [](PyEp& e, uintptr_t y, uintptr_t weights, uintptr_t out, uintptr_t stream) {
        nb::gil_scoped_release unlocked;
        e.buf->combine(ptr<const void>(y), ptr<const float>(weights), ptr(out), stream_of(stream));
      })
      .def("dispatch_send", [](PyEp& e, uintptr_t x, int num_tokens, uintptr_t topk_idx, bool idx64, uintptr_t stream) {
        tw::EpLowLatencyArgs a;
        a.x = ptr<const void>(x), a.num_tokens = num_tokens, a.topk_idx = ptr<const void>(topk_idx);
        a.index_type = idx64 ? tw::EpIndex::kInt64 : tw::EpIndex::kInt32;
        nb::gil_scoped_release unlocked;
        e.buf->dispatch_send(a, stream_of(stream));
      })
      .def("dispatch_recv", [](PyEp& e, uintptr_t stream) {
        tw::EpLowLatencyRecv r;
        {
          nb::gil_scoped_release unlocked;
          r = e.buf->dispatch_recv(stream_of(stream));
        }
        return ll_dict(r);
      })
      .def("combine_send", [](PyEp& e, uintptr_t y, uintptr_t stream) {
        nb::gil_scoped_release unlocked;
        e.buf->combine_send(ptr<const void>(y), stream_of(stream));
      })
      .def("combine_recv", [](PyEp& e, uintptr_t weights, uintptr_t out, uintptr_t stream) {
        nb::gil_scoped_release unlocked;
        e.buf->combine_recv(ptr<const float>(weights), ptr(out), stream_of(stream));
      })
      .def("num_recv", [](PyEp& e, uintptr_t stream) {
        nb::gil_scoped_release unlocked;
        return e.buf->num_recv(stream_of(stream));
      })
      .def("check", [](PyEp& e, uintptr_t stream) {
        nb::gil_scoped_release unlocked;
        e.buf->check(stream_of(stream));
      })
      .def("close", [](PyEp& e) {
        nb::gil_scoped_release unlocked;
        e.buf.reset();  // collective: its window
      });
}

}  // namespace tw_py
