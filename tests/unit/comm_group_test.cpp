// The communicator factory by backend name.
#include <string>

#include "catch.h"
#include "comm/group.h"
#include "core/error.h"

using fpg::UsageError;
using namespace fpg::comm;

#if defined(FPGATHER_HAVE_NCCL)
constexpr bool kNccl = true;
#else
constexpr bool kNccl = false;
#endif
#if defined(FPGATHER_HAVE_MPI)
constexpr bool kMpi = true;
#else
constexpr bool kMpi = false;
#endif

TEST_CASE("make_communicator_group knows threads and names the backends not built", "[comm]") {
  REQUIRE(communicator_backends() == std::vector<std::string>{"threads", "nccl", "mpi"});
  REQUIRE(communicator_backend_built("threads"));
  REQUIRE(communicator_backend_built("nccl") == kNccl);
  REQUIRE(communicator_backend_built("mpi") == kMpi);

  auto g = make_communicator_group("threads", 4);
  REQUIRE(g->backend() == "threads");
  REQUIRE(g->size() == 4);

  // Not built: the error says so. Built: nccl with more ranks than GPUs, and mpi outside mpirun,
  // are usage errors naming the reason.
  const std::pair<const char*, bool> cases[] = {{"nccl", kNccl}, {"mpi", kMpi}};
  for (const auto& [name, built] : cases) {
    std::string what;
    try {
      make_communicator_group(name, 4097);
    } catch (const UsageError& e) {
      what = e.what();
    }
    REQUIRE(what.find(built ? (std::string(name) == "nccl" ? "CUDA device" : "mpirun") : "not built") !=
            std::string::npos);
  }
  REQUIRE_THROWS_AS(make_communicator_group("gloo", 2), UsageError);
  REQUIRE_THROWS_AS(make_communicator_group("threads", 0), UsageError);
  REQUIRE_THROWS_AS(make_communicator_group("threads", -3), UsageError);
}
