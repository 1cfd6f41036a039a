//! The reduction operators and the element types they apply to.
//!
//! Integers wrap (C's unsigned arithmetic; for signed types C leaves overflow
//! undefined, we wrap). `MAX`/`MIN` on floating point keep the accumulated
//! value unless the other one compares greater (less), so a NaN operand is
//! dropped unless it came first. Complex numbers are `[re, im]` pairs and
//! multiply as `(ac - bd) + (ad + bc)i` (no special cases for infinities).

/// `acc = acc ⊕ x` for one operator and one element type.
pub trait Combine<T> {
    /// Combines `x` into `acc`.
    fn combine(acc: &mut T, x: &T);
}

/// Bitwise AND.
#[derive(Debug)]
pub struct And;
/// Bitwise OR.
#[derive(Debug)]
pub struct Or;
/// Bitwise XOR.
#[derive(Debug)]
pub struct Xor;
/// Maximum.
#[derive(Debug)]
pub struct Max;
/// Minimum.
#[derive(Debug)]
pub struct Min;
/// Sum.
#[derive(Debug)]
pub struct Sum;
/// Product.
#[derive(Debug)]
pub struct Prod;

macro_rules! int_ops {
    ($($t:ty),*) => {$(
        impl Combine<$t> for And { #[inline] fn combine(a: &mut $t, x: &$t) { *a &= *x } }
        impl Combine<$t> for Or { #[inline] fn combine(a: &mut $t, x: &$t) { *a |= *x } }
        impl Combine<$t> for Xor { #[inline] fn combine(a: &mut $t, x: &$t) { *a ^= *x } }
        impl Combine<$t> for Max { #[inline] fn combine(a: &mut $t, x: &$t) { if *x > *a { *a = *x } } }
        impl Combine<$t> for Min { #[inline] fn combine(a: &mut $t, x: &$t) { if *x < *a { *a = *x } } }
        impl Combine<$t> for Sum { #[inline] fn combine(a: &mut $t, x: &$t) { *a = a.wrapping_add(*x) } }
        impl Combine<$t> for Prod { #[inline] fn combine(a: &mut $t, x: &$t) { *a = a.wrapping_mul(*x) } }
    )*};
}
int_ops!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

macro_rules! float_ops {
    ($($t:ty),*) => {$(
        impl Combine<$t> for Max { #[inline] fn combine(a: &mut $t, x: &$t) { if *x > *a { *a = *x } } }
        impl Combine<$t> for Min { #[inline] fn combine(a: &mut $t, x: &$t) { if *x < *a { *a = *x } } }
        impl Combine<$t> for Sum { #[inline] fn combine(a: &mut $t, x: &$t) { *a += *x } }
        impl Combine<$t> for Prod { #[inline] fn combine(a: &mut $t, x: &$t) { *a *= *x } }
        impl Combine<[$t; 2]> for Sum {
            #[inline]
            fn combine(a: &mut [$t; 2], x: &[$t; 2]) {
                a[0] += x[0];
                a[1] += x[1];
            }
        }
        impl Combine<[$t; 2]> for Prod {
            #[inline]
            fn combine(a: &mut [$t; 2], x: &[$t; 2]) {
                let re = a[0] * x[0] - a[1] * x[1];
                let im = a[0] * x[1] + a[1] * x[0];
                *a = [re, im];
            }
        }
    )*};
}
float_ops!(f32, f64);

#[cfg(test)]
mod test {
    use super::*;

    fn fold<T: Copy, O: Combine<T>>(v: &[T]) -> T {
        let mut a = v[0];
        for x in &v[1..] {
            O::combine(&mut a, x);
        }
        a
    }

    #[test]
    fn integer_operators() {
        let v = [0b1100u8, 0b1010, 0b0110];
        assert_eq!(fold::<u8, And>(&v), 0);
        assert_eq!(fold::<u8, Or>(&v), 0b1110);
        assert_eq!(fold::<u8, Xor>(&v), 0);
        assert_eq!(fold::<i32, Max>(&[-5, 3, -7]), 3);
        assert_eq!(fold::<i32, Min>(&[-5, 3, -7]), -7);
        assert_eq!(fold::<u8, Sum>(&[200, 100]), 44, "wraps");
        assert_eq!(fold::<i16, Prod>(&[-3, 4, 5]), -60);
    }

    #[test]
    fn float_and_complex_operators() {
        assert_eq!(fold::<f64, Max>(&[1.5, -2.0, 9.25]), 9.25);
        assert_eq!(fold::<f32, Min>(&[1.5, -2.0, 9.25]), -2.0);
        assert_eq!(fold::<f64, Sum>(&[0.5, 0.25]), 0.75);
        // (1+2i)(3+4i) = -5+10i
        assert_eq!(
            fold::<[f64; 2], Prod>(&[[1.0, 2.0], [3.0, 4.0]]),
            [-5.0, 10.0]
        );
        assert_eq!(fold::<[f32; 2], Sum>(&[[1.0, 2.0], [3.0, 4.0]]), [4.0, 6.0]);
    }
}

/// C's `long double` on x86-64 as reductions see it: the 16 bytes (80-bit
/// extended value, 6 bytes of padding) in a `u128`, which has its 16-byte
/// alignment. Arithmetic runs on the x87 unit, as C's does.
#[cfg(target_arch = "x86_64")]
pub type LongDouble = u128;

#[cfg(target_arch = "x86_64")]
mod x87 {
    //! `long double` arithmetic and comparison through x87 instructions
    //! (Rust has no 80-bit float type).

    use super::{Combine, LongDouble, Max, Min, Prod, Sum};

    /// `*a = *a + *b` (`MUL`: `*a * *b`) in extended precision.
    macro_rules! x87_binop {
        ($name:ident, $insn:literal) => {
            #[inline]
            fn $name(a: &mut LongDouble, b: &LongDouble) {
                let pa: *mut LongDouble = a;
                let pb: *const LongDouble = b;
                // SAFETY: `pa`/`pb` point to 16 valid bytes (the first 10 are
                // read/written: the 80-bit value); the x87 stack is balanced
                // (two loads, one op that pops, one store that pops) and the
                // registers used are declared clobbered.
                unsafe {
                    core::arch::asm!(
                        "fld tbyte ptr [{a}]",
                        "fld tbyte ptr [{b}]",
                        $insn,
                        "fstp tbyte ptr [{a}]",
                        a = in(reg) pa,
                        b = in(reg) pb,
                        out("st(0)") _,
                        out("st(1)") _,
                        options(nostack),
                    );
                }
            }
        };
    }
    x87_binop!(add, "faddp st(1), st");
    x87_binop!(mul, "fmulp st(1), st");

    /// `x < y` (false when unordered).
    #[inline]
    fn less(x: &LongDouble, y: &LongDouble) -> bool {
        let (px, py): (*const LongDouble, *const LongDouble) = (x, y);
        let (below, unordered): (u8, u8);
        // SAFETY: 10 bytes read at each pointer; the x87 stack is balanced
        // (two loads, fcomip pops one, fstp pops the other).
        unsafe {
            core::arch::asm!(
                "fld tbyte ptr [{y}]",
                "fld tbyte ptr [{x}]",
                "fcomip st, st(1)",
                "fstp st(0)",
                "setb {b}",
                "setp {u}",
                x = in(reg) px,
                y = in(reg) py,
                b = out(reg_byte) below,
                u = out(reg_byte) unordered,
                out("st(0)") _,
                out("st(1)") _,
                options(nostack),
            );
        }
        below == 1 && unordered == 0
    }

    impl Combine<LongDouble> for Sum {
        #[inline]
        fn combine(a: &mut LongDouble, x: &LongDouble) {
            add(a, x)
        }
    }
    impl Combine<LongDouble> for Prod {
        #[inline]
        fn combine(a: &mut LongDouble, x: &LongDouble) {
            mul(a, x)
        }
    }
    impl Combine<LongDouble> for Max {
        #[inline]
        fn combine(a: &mut LongDouble, x: &LongDouble) {
            if less(a, x) {
                *a = *x
            }
        }
    }
    impl Combine<LongDouble> for Min {
        #[inline]
        fn combine(a: &mut LongDouble, x: &LongDouble) {
            if less(x, a) {
                *a = *x
            }
        }
    }

    #[cfg(test)]
    mod test {
        use super::*;

        /// The 80-bit encoding of a small integer `v > 0`.
        fn ld(v: u64) -> LongDouble {
            let e = 63 - v.leading_zeros();
            let mant = v << (63 - e);
            u128::from(mant) | (u128::from(16383 + e) << 64)
        }

        #[test]
        fn extended_arithmetic() {
            let mut a = ld(6);
            Sum::combine(&mut a, &ld(7));
            assert_eq!(a & ((1 << 80) - 1), ld(13));
            Prod::combine(&mut a, &ld(3));
            assert_eq!(a & ((1 << 80) - 1), ld(39));
            let mut m = ld(5);
            Max::combine(&mut m, &ld(9));
            assert_eq!(m, ld(9));
            Min::combine(&mut m, &ld(2));
            assert_eq!(m, ld(2));
            Max::combine(&mut m, &ld(1));
            assert_eq!(m, ld(2));
        }
    }
}
