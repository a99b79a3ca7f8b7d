//! [`Parts`]: the buffers of one range of a file as the RPCs returned them, cut into
//! cache pages and reads without copying.

use bytes::{Bytes, BytesMut};

/// Consecutive buffers that together hold one range of a file, as the RPCs returned them.
#[derive(Debug, Default, Clone)]
pub struct Parts {
    /// Each buffer with the offset of its first byte within the range.
    parts: Vec<(u64, Bytes)>,
    len: u64,
}

impl From<Bytes> for Parts {
    fn from(data: Bytes) -> Self {
        let mut parts = Parts::default();
        parts.push(data);
        parts
    }
}

impl Parts {
    /// Appends the next buffer.
    pub fn push(&mut self, data: Bytes) {
        if !data.is_empty() {
            self.parts.push((self.len, data));
            self.len += self.parts.last().map_or(0, |(_, d)| d.len() as u64);
        }
    }

    /// Appends every buffer of `other`.
    pub fn extend(&mut self, other: Parts) {
        for (_, d) in other.parts {
            self.push(d);
        }
    }

    /// Bytes held.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes `[a, b)` of the range (clamped to what is held): a slice of one buffer when
    /// they lie in one, else a copy.
    pub fn slice(&self, a: u64, b: u64) -> Bytes {
        let b = b.min(self.len);
        if a >= b {
            return Bytes::new();
        }
        let first = self.parts.partition_point(|(start, _)| *start <= a) - 1;
        let (start, data) = &self.parts[first];
        if b - start <= data.len() as u64 {
            return data.slice((a - start) as usize..(b - start) as usize);
        }
        let mut out = BytesMut::with_capacity((b - a) as usize);
        for (start, data) in &self.parts[first..] {
            if *start >= b {
                break;
            }
            let x = a.saturating_sub(*start) as usize;
            let y = ((b - start) as usize).min(data.len());
            out.extend_from_slice(&data[x..y]);
        }
        out.freeze()
    }

    /// Copies the first bytes held into `dst`, as many as fit; returns how many.
    pub fn copy_to(&self, dst: &mut [u8]) -> usize {
        let mut at = 0;
        for (_, data) in &self.parts {
            let n = data.len().min(dst.len() - at);
            dst[at..at + n].copy_from_slice(&data[..n]);
            at += n;
            if at == dst.len() {
                break;
            }
        }
        at
    }

    /// Everything in one buffer (no copy if there is one part).
    pub fn concat(self) -> Bytes {
        match self.parts.as_slice() {
            [] => Bytes::new(),
            [(_, only)] => only.clone(),
            _ => self.slice(0, self.len),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any range of any split reads the same bytes as the whole.
        #[test]
        fn parts_slice_like_the_whole(
            sizes in proptest::collection::vec(0usize..64, 0..8),
            a in 0u64..600,
            n in 0u64..600,
        ) {
            let total: usize = sizes.iter().sum();
            let whole: Vec<u8> = (0..total).map(|i| (i * 7 % 251) as u8).collect();
            let mut parts = Parts::default();
            let mut at = 0;
            for s in &sizes {
                parts.push(Bytes::copy_from_slice(&whole[at..at + s]));
                at += s;
            }
            prop_assert_eq!(parts.len(), total as u64);
            let b = a.saturating_add(n);
            let lo = (a as usize).min(total);
            let hi = (b as usize).min(total).max(lo);
            prop_assert_eq!(&parts.slice(a, b)[..], &whole[lo..hi]);
            let mut dst = vec![0xAAu8; n as usize];
            let copied = parts.copy_to(&mut dst);
            prop_assert_eq!(copied, (n as usize).min(total));
            prop_assert_eq!(&dst[..copied], &whole[..copied]);
            prop_assert!(dst[copied..].iter().all(|&x| x == 0xAA));
            prop_assert_eq!(&parts.clone().concat()[..], &whole[..]);
        }
    }

    #[test]
    fn a_slice_inside_one_part_is_not_a_copy() {
        let mut parts = Parts::default();
        let first = Bytes::from(vec![1u8; 100]);
        parts.push(first.clone());
        parts.push(Bytes::from(vec![2u8; 100]));
        let s = parts.slice(10, 60);
        assert_eq!(s.as_ptr(), first[10..].as_ptr());
        assert_eq!(
            &parts.slice(90, 110)[..],
            &[[1u8; 10], [2u8; 10]].concat()[..]
        );
    }
}
