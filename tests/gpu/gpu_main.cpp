// tests/gpu/gpu_main.cpp — main() of tilewire_gpu_tests.
//
// Death tests (timeout_test.cu) run "threadsafe": the child re-executes this binary, which is
// safe with the threads and CUDA state the parent already has. Without a GPU every test reports
// SKIPPED with its reason; with --skip-exit-code=N (ctest passes 77, its SKIP_RETURN_CODE) a run
// in which every test was skipped exits N, so ctest shows the binary as "Skipped", not "Passed".
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  // Before any CUDA call: virtual teams (TILEWIRE_TEST_VIRTUAL) need a hardware queue per rank's
  // stream (Comm::run_virtual checks it).
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);  // and kernels loaded up front (Comm::run_virtual checks it)
  ::testing::InitGoogleTest(&argc, argv);  // removes the --gtest_* flags it knows
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  int skip_code = 0;
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--skip-exit-code=", 17) == 0) skip_code = std::atoi(argv[i] + 17);

  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    std::printf("tilewire GPU tests: no CUDA GPU (%s); every test below is SKIPPED\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
  else
    std::printf("tilewire GPU tests: %d CUDA GPU(s) visible\n", n);
  std::fflush(stdout);

  const int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest& ut = *::testing::UnitTest::GetInstance();
  if (rc == 0 && skip_code != 0 && ut.test_to_run_count() > 0 && ut.skipped_test_count() == ut.test_to_run_count())
    return skip_code;
  return rc;
}
