// The communicator factory by backend name.
#include <string>

#include "catch.h"
#include "comm/group.h"
#include "core/error.h"

using fpg::UsageError;
using namespace fpg::comm;

TEST_CASE("make_communicator_group knows threads and names the backends not built", "[comm]") {
  REQUIRE(communicator_backends() == std::vector<std::string>{"threads", "nccl", "mpi"});
  REQUIRE(communicator_backend_built("threads"));
  REQUIRE_FALSE(communicator_backend_built("nccl"));
  REQUIRE_FALSE(communicator_backend_built("mpi"));

  auto g = make_communicator_group("threads", 4);
  REQUIRE(g->backend() == "threads");
  REQUIRE(g->size() == 4);

  for (const char* name : {"nccl", "mpi"}) {
    std::string what;
    try {
      make_communicator_group(name, 2);
    } catch (const UsageError& e) {
      what = e.what();
    }
    REQUIRE(what.find("not built") != std::string::npos);
  }
  REQUIRE_THROWS_AS(make_communicator_group("gloo", 2), UsageError);
  REQUIRE_THROWS_AS(make_communicator_group("threads", 0), UsageError);
  REQUIRE_THROWS_AS(make_communicator_group("threads", -3), UsageError);
}
