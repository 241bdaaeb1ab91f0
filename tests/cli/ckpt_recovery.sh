#!/usr/bin/env bash
# Crash recovery of a checkpoint root by `train --load R --save R`, each leftover built by hand as a
# kill would leave it: a committed step newer than `latest` (adopted, or set aside when invalid),
# staging directories of dead saves (removed) beside one a live writer holds (kept), a retention
# cut short and an older fpgather's half-deleted checkpoint (finished). The run then saves on.
source "$(dirname "$0")/common.sh"
F=("$FPGATHER" --no-progress)
cd "$WORK" || exit 1
R=root

expect_exit 0 "${F[@]}" train --steps 4 --save-every 2 --save $R
# Killed between step 4's rename and the update of `latest`.
echo step-00000002 >$R/latest
# A staging directory of a save killed an hour ago, and one whose writer is alive (this shell holds
# the flock on it, as a save does), as old.
mkdir $R/.step-00000003.tmp-0123456789abcdef
: >$R/.step-00000003.tmp-0123456789abcdef/rank-00000.h5
touch -d '1 hour ago' $R/.step-00000003.tmp-0123456789abcdef
mkdir $R/.step-00000005.tmp-fedcba9876543210
touch -d '1 hour ago' $R/.step-00000005.tmp-fedcba9876543210
exec 9<$R/.step-00000005.tmp-fedcba9876543210
flock -n 9 || fail "cannot lock a staging directory"
# Retention killed mid-deletion, and a checkpoint an older fpgather deleted in place.
cp -r $R/step-00000002 $R/.step-00000001.deleting
rm $R/.step-00000001.deleting/index.h5
cp -r $R/step-00000002 $R/step-00000000
rm $R/step-00000000/index.h5

expect_exit 0 "${F[@]}" train --steps 6 --save-every 2 --load $R --save $R
expect_in "$WORK/out" "resumed from $R/step-00000004 at step 4"
expect_in "$WORK/out" "saved $R/step-00000006"
expect_in "$WORK/err" "adopted step-00000004 as latest"
expect_in "$WORK/err" "removed .step-00000003.tmp-0123456789abcdef, the staging directory of a save that did not finish"
expect_in "$WORK/err" "finished deleting .step-00000001.deleting"
expect_in "$WORK/err" "removed step-00000000, a checkpoint left without index.h5"
[ -d $R/.step-00000005.tmp-fedcba9876543210 ] || fail "removed the staging directory of a live writer"
exec 9<&-  # the writer ends
[ "$(LC_ALL=C ls -A $R | tr '\n' ' ')" = ".step-00000005.tmp-fedcba9876543210 latest step-00000002 step-00000004 step-00000006 " ] ||
  fail "left: $(ls -A $R | tr '\n' ' ')"
expect_exit 0 "${F[@]}" validate --data $R
expect_in "$WORK/out" "step-00000006: valid"

# A newer committed step that fails validation (its index edited after the commit) is set aside,
# not resumed from and not in the way of the next save.
cp -r $R/step-00000006 $R/step-00000008
perl -0777 -pi -e 's/"next_step":6/"next_step":5/' $R/step-00000008/index.h5
echo step-00000006 >$R/latest
expect_exit 0 "${F[@]}" --json train --steps 8 --save-every 2 --load $R --save $R
expect_in "$WORK/out" '"loaded": "root/step-00000006"'
expect_in "$WORK/out" "set step-00000008 aside as .step-00000008.invalid"
expect_in "$WORK/err" "index_checksum"
expect_in "$WORK/err" "removed .step-00000005.tmp-fedcba9876543210"  # its writer is gone now
[ -f $R/.step-00000008.invalid/index.h5 ] || fail "the invalid checkpoint was not kept aside"
expect_exit 0 "${F[@]}" validate --data $R
expect_in "$WORK/out" "step-00000008: valid"

# No `latest` at all (its first write failed): the newest committed checkpoint is adopted.
rm $R/latest
expect_exit 0 "${F[@]}" train --steps 10 --load $R --save $R
expect_in "$WORK/out" "resumed from $R/step-00000008 at step 8"

# Retention deletes by renaming first: nothing half-deleted or hidden is left.
expect_exit 0 "${F[@]}" train --steps 14 --save-every 2 --load $R --save $R --keep 2
[ "$(LC_ALL=C ls -A $R | tr '\n' ' ')" = ".step-00000008.invalid latest step-00000012 step-00000014 " ] ||
  fail "--keep 2 left: $(ls -A $R | tr '\n' ' ')"
finish
