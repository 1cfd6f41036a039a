//! The executable's global and static variables as symmetric data objects.
//!
//! OpenSHMEM programs put to and get from global and static variables, not
//! only heap memory. At `shmem_init` the executable's writable data (its
//! read-write `PT_LOAD` segment: `.data` and `.bss`, without the part that
//! becomes read-only after relocation) is moved into the PE's shared-memory
//! object, right after the symmetric heap ([`switchyard::context::Alias`]). The
//! variables keep their addresses and values; every transport then reaches
//! them as heap offsets, and same-node peers (which map the object) with the
//! same hardware atomics as heap words.
//!
//! Every PE runs the same executable, so a variable sits at the same distance
//! from the start of that range on every PE, whatever address the loader chose
//! (PIE): that distance plus the range's heap offset is its symmetric address.
//!
//! Caveats, documented for users: call `shmem_init` before starting threads
//! (writes by another thread during init could be lost), and a process that
//! `fork`s after init shares these pages with its child.

use core::ffi::{c_int, c_void};

/// The page-rounded range of the main executable's writable data, or `None`
/// when it has none (or the loader reports none).
pub fn executable_data() -> Option<(usize, usize)> {
    let mut found: Option<(usize, usize)> = None;
    // SAFETY: `dl_iterate_phdr` calls `first_object` with valid info records;
    // `found` outlives the call and is only used by the callback meanwhile.
    unsafe { libc::dl_iterate_phdr(Some(first_object), (&raw mut found).cast()) };
    found
}

const PAGE: usize = 4096;

/// The alias to pass to
/// [`InitOptions::symmetric_data`](switchyard::context::InitOptions::symmetric_data),
/// or `None` when the executable has no writable data.
///
/// # Safety
///
/// No other thread of the process runs while the context is created with it
/// (`shmem_init`'s documented precondition): the range is copied and
/// remapped then.
pub unsafe fn alias() -> Option<switchyard::context::Alias> {
    let (start, len) = executable_data()?;
    // SAFETY: the executable's own writable data, page aligned and mapped
    // for the life of the process; the caller guarantees no other thread
    // runs meanwhile.
    unsafe { switchyard::context::Alias::new(start, len) }.ok()
}

/// Called for each loaded object, the main program first; stops after it.
unsafe extern "C" fn first_object(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: the loader passes a valid record, and `data` is the
    // `Option<(usize, usize)>` of `executable_data`.
    let (info, out) = unsafe { (&*info, &mut *data.cast::<Option<(usize, usize)>>()) };
    if info.dlpi_phdr.is_null() {
        return 1;
    }
    // SAFETY: the loader's program headers: `dlpi_phnum` entries at `dlpi_phdr`.
    let phdrs =
        unsafe { core::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    *out = writable_range(
        info.dlpi_addr as usize,
        phdrs
            .iter()
            .map(|p| (p.p_type, p.p_flags, p.p_vaddr as usize, p.p_memsz as usize)),
    );
    1
}

/// The range to alias, from program headers `(type, flags, vaddr, memsz)` and
/// the load bias: the writable `PT_LOAD` segments without the `PT_GNU_RELRO`
/// part the loader makes read-only (it rounds that part's end down to a page,
/// so a page holding both stays writable), rounded out to pages. GNU ld puts
/// RELRO at the start of the one writable segment; lld gives it a segment of
/// its own. Of what remains, the highest run of adjacent pages is taken (the
/// one holding `.data` and `.bss`).
pub fn writable_range(
    bias: usize,
    phdrs: impl Iterator<Item = (u32, u32, usize, usize)> + Clone,
) -> Option<(usize, usize)> {
    let relro = match phdrs.clone().find(|&(t, ..)| t == libc::PT_GNU_RELRO) {
        Some((_, _, rv, rm)) => {
            let s = bias.checked_add(rv)?;
            Some((s / PAGE * PAGE, s.checked_add(rm)? / PAGE * PAGE))
        }
        None => None,
    };
    let mut best: Option<(usize, usize)> = None;
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for (_, _, vaddr, memsz) in
        phdrs.filter(|&(t, f, _, m)| t == libc::PT_LOAD && f & libc::PF_W != 0 && m > 0)
    {
        let seg_start = bias.checked_add(vaddr)?;
        let mut start = seg_start / PAGE * PAGE;
        let end = seg_start
            .checked_add(memsz)?
            .checked_next_multiple_of(PAGE)?;
        if let Some((rs, re)) = relro
            && rs <= start
            && re > start
        {
            start = re;
        }
        if end > start {
            ranges.push((start, end));
        }
    }
    ranges.sort_unstable();
    for (s, e) in ranges {
        best = match best {
            Some((bs, be)) if s <= be => Some((bs, be.max(e))),
            _ => Some((s, e)),
        };
    }
    best.map(|(s, e)| (s, e - s))
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: u32 = libc::PF_W | libc::PF_R;

    #[test]
    fn relro_part_is_left_out_and_pages_round_out() {
        let ph = [
            (libc::PT_LOAD, libc::PF_R | libc::PF_X, 0, 0x1000),
            (libc::PT_LOAD, W, 0x3de8, 0x240),
            (libc::PT_GNU_RELRO, libc::PF_R, 0x3de8, 0x218),
        ];
        // RW segment 0x3de8..0x4028; RELRO ends 0x4000 (a page): data from there.
        assert_eq!(
            writable_range(0x5555_0000_0000, ph.into_iter()),
            Some((0x5555_0000_4000, 0x1000))
        );
    }

    #[test]
    fn a_relro_end_inside_a_page_keeps_that_page() {
        let ph = [
            (libc::PT_LOAD, W, 0x2e10, 0x3000),
            (libc::PT_GNU_RELRO, libc::PF_R, 0x2e10, 0x1100),
        ];
        // RELRO ends at 0x3f10: the loader protects up to 0x3000 only.
        assert_eq!(writable_range(0, ph.into_iter()), Some((0x3000, 0x3000)));
    }

    #[test]
    fn lld_gives_relro_a_segment_of_its_own() {
        let ph = [
            (libc::PT_LOAD, libc::PF_R, 0, 0x52178),
            (libc::PT_LOAD, W, 0xed740, 0x98c0),
            (libc::PT_LOAD, W, 0xf79c0, 0xac3),
            (libc::PT_GNU_RELRO, libc::PF_R, 0xed740, 0x98c0),
        ];
        assert_eq!(writable_range(0, ph.into_iter()), Some((0xf7000, 0x2000)));
    }

    #[test]
    fn no_relro_no_writable_segment() {
        assert_eq!(
            writable_range(0, [(libc::PT_LOAD, W, 0x1010, 0x10)].into_iter()),
            Some((0x1000, 0x1000))
        );
        assert_eq!(
            writable_range(0, [(libc::PT_LOAD, libc::PF_R, 0, 0x1000)].into_iter()),
            None
        );
        assert_eq!(
            writable_range(
                usize::MAX - 10,
                [(libc::PT_LOAD, W, 0x1000, 0x10)].into_iter()
            ),
            None,
            "overflow is no range"
        );
    }

    #[test]
    fn this_test_binary_has_a_range_holding_its_statics() {
        static mut PROBE: u64 = 5;
        let (start, len) = executable_data().expect("a writable segment");
        let at = (&raw const PROBE) as usize;
        assert!(
            at >= start && at < start + len,
            "{at:#x} in {start:#x}+{len:#x}"
        );
        assert_eq!(start % PAGE, 0);
        assert_eq!(len % PAGE, 0);
    }
}
