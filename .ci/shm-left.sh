# Sourced by .ci/launchers.sh and .ci/slurm.sh.
#
# shm_left BEFORE: prints the shared-memory objects of ours (/dev/shm/
# switchyard-*) that are there now but were not in BEFORE (a listing taken
# before the run) and that no live process maps: what the run left behind.
# An object a live process maps belongs to something still running beside
# the script (a developer's tests, say), not to the run, whose PEs are gone
# when it ends.
shm_left() {
  comm -13 <(printf '%s\n' "$1" | sort) <(ls /dev/shm | grep '^switchyard-' | sort) | grep . |
    while read -r o; do
      grep -qsE -- "/dev/shm/$o( |\$)" /proc/[0-9]*/maps || echo "$o"
    done
}
