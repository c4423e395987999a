// tests/gpu/multiprocess_test.cu — the one-process-per-GPU path: tw::Comm::unique_id() +
// tw::Comm::create(id, rank, nranks, device), as under MPI or torch.distributed.
//
//   MultiProcess.AllReduceOneProcessPerGpu   (2+ GPUs) the parent makes the id, writes it to a temp
//       file and spawns one child per GPU: this binary again, filtered to MultiProcess.Child, with
//       TILEWIRE_MP_RANK / TILEWIRE_MP_NRANKS / TILEWIRE_MP_IDFILE in its environment. It waits
//       (children still running after 60 s are killed) and expects every child to exit 0.
//   MultiProcess.Child   skipped unless those variables are set. Reads the id, creates its
//       communicator on GPU `rank`, runs exact all-reduces (auto, oneshot, twoshot, in- and
//       out-of-place) and checks them against the host sum; GoogleTest's exit code is the verdict.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common.cuh"

extern char** environ;

namespace {
using namespace tw_test;
using tw::AllReduceAlgo;
using tw::DType;

constexpr const char* kRankVar = "TILEWIRE_MP_RANK";
constexpr const char* kNranksVar = "TILEWIRE_MP_NRANKS";
constexpr const char* kIdFileVar = "TILEWIRE_MP_IDFILE";
constexpr double kChildDeadlineS = 60;

std::string describe_status(int st) {
  if (WIFEXITED(st)) return "exited with " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return std::string("killed by signal ") + strsignal(WTERMSIG(st));
  return "status " + std::to_string(st);
}

// Spawns this binary with `args` and the current environment plus `extra` ("NAME=value").
pid_t spawn_self(const std::vector<std::string>& args, const std::vector<std::string>& extra) {
  std::vector<std::string> env_strings = extra;
  for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  std::vector<char*> argv, envp;
  static char self[] = "/proc/self/exe";
  argv.push_back(self);
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, self, nullptr, nullptr, argv.data(), envp.data());
  return rc == 0 ? pid : -1;
}

TEST(MultiProcess, AllReduceOneProcessPerGpu) {
  if (std::getenv(kRankVar)) GTEST_SKIP() << "this process is a child of the multi-process test";
  TW_SKIP_UNLESS_GPUS(2);
  const int P = gpu_count();

  // The id: made here (NCCL's bootstrap root lives in this process until the children connect).
  const ncclUniqueId id = tw::Comm::unique_id();
  char path[] = "/tmp/tilewire_mp_id_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0) << "mkstemp: " << strerror(errno);
  ASSERT_EQ(write(fd, &id, sizeof id), (ssize_t)sizeof id);
  close(fd);

  std::vector<pid_t> kids(P, -1);
  for (int r = 0; r < P; ++r) {
    kids[r] = spawn_self({"--gtest_filter=MultiProcess.Child"},
                         {std::string(kRankVar) + "=" + std::to_string(r),
                          std::string(kNranksVar) + "=" + std::to_string(P), std::string(kIdFileVar) + "=" + path});
    EXPECT_GT(kids[r], 0) << "posix_spawn of rank " << r << " failed";
  }

  // Wait for all, killing whatever is still running at the deadline.
  std::vector<int> status(P, -1);
  std::vector<bool> done(P, false);
  const auto t0 = std::chrono::steady_clock::now();
  for (int left = P; left > 0;) {
    for (int r = 0; r < P; ++r) {
      if (done[r]) continue;
      if (kids[r] <= 0 || waitpid(kids[r], &status[r], WNOHANG) == kids[r]) done[r] = true, --left;
    }
    if (left == 0) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > kChildDeadlineS) {
      for (int r = 0; r < P; ++r)
        if (!done[r]) {
          ADD_FAILURE() << "rank " << r << " still running after " << kChildDeadlineS << " s: killed";
          kill(kids[r], SIGKILL);
          waitpid(kids[r], &status[r], 0);
          done[r] = true;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  unlink(path);
  for (int r = 0; r < P; ++r)
    if (kids[r] > 0)
      EXPECT_TRUE(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0)
          << "child rank " << r << " " << describe_status(status[r]) << " (its output is above)";
}

TEST(MultiProcess, Child) {
  const char* rank_s = std::getenv(kRankVar);
  const char* nranks_s = std::getenv(kNranksVar);
  const char* idfile = std::getenv(kIdFileVar);
  if (!rank_s || !nranks_s || !idfile) GTEST_SKIP() << "runs only as a child of MultiProcess.AllReduceOneProcessPerGpu";
  const int rank = std::atoi(rank_s), nranks = std::atoi(nranks_s);
  ncclUniqueId id{};
  {
    std::ifstream f(idfile, std::ios::binary);
    ASSERT_TRUE(f.read(reinterpret_cast<char*>(&id), sizeof id)) << "cannot read the id from " << idfile;
  }
  ASSERT_EQ(cudaSetDevice(rank), cudaSuccess);
  std::unique_ptr<tw::Comm> comm = tw::Comm::create(id, rank, nranks, rank);
  ASSERT_EQ(comm->rank(), rank);
  ASSERT_EQ(comm->nranks(), nranks);
  ASSERT_EQ(comm->device(), rank);

  // Same calls, in the same order, on every child; no early exits (peers would wait for us).
  Stream s;
  const DType dt = DType::kBFloat16;
  for (size_t count : {size_t{7}, size_t{100003}, size_t{4} << 20}) {
    const size_t bytes = count * tw::dtype_size(dt);
    const uint64_t seed = 0x3F00 + count;
    tw::Window send = comm->alloc_window(bytes), recv = comm->alloc_window(bytes);
    const Bytes want = exact_sum(dt, count, seed, nranks);
    comm->barrier();
    for (bool in_place : {false, true}) {
      for (AllReduceAlgo algo : {AllReduceAlgo::kAuto, AllReduceAlgo::kOneShot, AllReduceAlgo::kTwoShot}) {
        if (algo == AllReduceAlgo::kOneShot && bytes > tw::oneshot_max_bytes(*comm)) continue;
        void* in = in_place ? recv.data() : send.data();
        poison(recv.data(), recv.bytes(), s);
        fill(in, dt, count, Fill::kSmallInt, seed, rank, s);
        tw::allreduce(*comm, tw::AllReduceArgs{in, recv.data(), count, dt, algo}, s);
        comm->sync(s);
        const Bytes got = to_host(recv.data(), bytes, s);
        EXPECT_EQ(compare_exact(got, want, dt, count), "") << "rank " << rank << " of " << nranks << ": count " << count
                                                           << (in_place ? " in-place " : " ") << tw::algo_name(algo);
        comm->barrier();
      }
    }
  }
}

}  // namespace
