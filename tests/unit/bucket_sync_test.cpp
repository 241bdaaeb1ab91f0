// pipeline/device/bucket_sync.h: the overlap bookkeeping of the device pipeline (host only, so tested here).
#include "pipeline/device/bucket_sync.h"

#include "catch.h"
#include "core/error.h"

using fpg::device::BucketSync;
using fpg::device::GatherState;
using fpg::device::SyncEvent;

TEST_CASE("bucket sync completes a bucket at its last grad report", "[bucket-sync]") {
  BucketSync s({1, 1, 0, 2, 0}, 3);  // params 2 and 4 in bucket 0, 0 and 1 in bucket 1, 3 in bucket 2
  CHECK((s.params_of(0) == std::vector<uint32_t>{2, 4}));
  CHECK(s.bucket_of(3) == 2);
  CHECK(!s.grad_ready(4));
  CHECK(s.grad_ready(3));  // bucket 2's only param
  CHECK(!s.grad_ready(0));
  CHECK(s.grad_ready(2));  // bucket 0 complete
  REQUIRE_THROWS_AS(s.grad_ready(2), fpg::InternalError);  // twice in a step
  s.mark_reduce_scatter_issued(0);
  CHECK(s.reduce_scatter_issued(0));
  CHECK(!s.reduce_scatter_issued(1));
  REQUIRE_THROWS_AS(s.mark_reduce_scatter_issued(0), fpg::InternalError);
  s.mark_grad_fn_returned();
  CHECK(s.log().size() == 6);  // four reports (the refused one is not logged), RS, returned
  CHECK(s.log()[4] == SyncEvent{SyncEvent::reduce_scatter_issued, 0});
  s.begin_step();  // counts start again
  CHECK(s.log().empty());
  CHECK(!s.reduce_scatter_issued(0));
  CHECK(!s.grad_ready(2));
  CHECK(s.grad_ready(4));
  REQUIRE_THROWS_AS(BucketSync({0, 3}, 2), fpg::InternalError);
}

TEST_CASE("bucket sync: a param is readable once its gather is waited and it is decoded", "[bucket-sync]") {
  BucketSync s({0, 1, 1}, 2);
  CHECK(s.readable(1));  // nothing issued: as built
  s.mark_gather_issued(1);
  CHECK(s.gather(1) == GatherState::issued);
  CHECK(s.readable(0));
  CHECK(!s.readable(1));
  CHECK(!s.decoded(2));
  REQUIRE_THROWS_AS(s.mark_decoded(1), fpg::InternalError);  // before the wait
  s.mark_gather_waited(1);
  CHECK(!s.readable(1));  // waited, not decoded yet
  s.mark_decoded(1);
  CHECK(s.readable(1));
  CHECK(!s.readable(2));
  s.mark_decoded(2);
  CHECK(s.readable(2));
}
