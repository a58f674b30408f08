//! Unique request and lease ids, generated as etcd's `idutil.Generator` does: the low 16
//! bits of the member id, then 40 bits of the start time in milliseconds, then a counter
//! that carries into the time bits. Ids from different members (and from restarts more than
//! a millisecond apart) do not collide.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

const TS_BITS: u32 = 40;
const COUNTER_BITS: u32 = 8;
const SUFFIX_BITS: u32 = TS_BITS + COUNTER_BITS;

pub struct IdGenerator {
    prefix: u64,
    suffix: AtomicU64,
}

impl IdGenerator {
    pub fn new(member_id: u64, now: SystemTime) -> Self {
        let millis = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        Self {
            prefix: (member_id & 0xffff) << SUFFIX_BITS,
            suffix: AtomicU64::new(low_bits(millis, TS_BITS) << COUNTER_BITS),
        }
    }

    pub fn next(&self) -> u64 {
        let suffix = self.suffix.fetch_add(1, Ordering::Relaxed) + 1;
        self.prefix | low_bits(suffix, SUFFIX_BITS)
    }

    /// A positive i64 id, as lease ids must be.
    pub fn next_lease_id(&self) -> i64 {
        (self.next() & (i64::MAX as u64)) as i64
    }
}

fn low_bits(x: u64, n: u32) -> u64 {
    x & ((1u64 << n) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ids_carry_the_member_prefix_and_increase() {
        let g = IdGenerator::new(0x1234_abcd, UNIX_EPOCH + Duration::from_millis(5));
        let a = g.next();
        let b = g.next();
        assert_eq!(a >> SUFFIX_BITS, 0xabcd);
        assert_eq!(b, a + 1);
        assert_eq!(a & 0xffff_ffff_ffff, (5 << 8) + 1);
        assert!(g.next_lease_id() > 0);
    }
}
