//! Collectives: barriers, broadcast, collect, fcollect, alltoall and
//! reductions, on teams and in the active-set forms with `pSync`/`pWrk`.
