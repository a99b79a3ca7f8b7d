//! Layout math: where the bytes of a file live.
//!
//! A component `[start, end)` with stripe size `S` and `N` stripes puts the file's chunk
//! `k = (x - start) / S` on stripe `k % N`, at object offset `(k / N) * S + (x - start) % S`.
//! Objects belong to one component, so object offsets are relative to the component start.
//! Everything here is pure arithmetic, tested against a byte-by-byte reference model.

use weft_proto::layout::{Layout, LayoutComponent};
use weft_proto::{Compression, Fid, ObjectId};

/// A contiguous run of file bytes that lives in one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// The OST holding the object.
    pub ost: u32,
    /// The object.
    pub object: ObjectId,
    /// Offset within the object.
    pub object_offset: u64,
    /// Offset within the file.
    pub file_offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// How the object is to be created if this piece creates it (its component's choice).
    pub compress: Compression,
}

/// Why a range cannot be mapped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// The range reaches a component that has no OSTs yet (a PFL component not written).
    #[error("component {id} at offset {start} is not instantiated")]
    NotInstantiated {
        /// The component's id.
        id: u32,
        /// Where it starts.
        start: u64,
    },
    /// No component covers the offset (a malformed layout).
    #[error("no layout component covers offset {0}")]
    Uncovered(u64),
    /// Offset plus length overflows.
    #[error("range overflows")]
    Overflow,
}

/// Maps `[offset, offset + len)` of a file to pieces, in file order. Pieces never cross a
/// stripe chunk boundary, so each can be sent (or split further) on its own.
pub fn map_range(layout: &Layout, fid: Fid, offset: u64, len: u64) -> Result<Vec<Piece>, MapError> {
    let end = offset.checked_add(len).ok_or(MapError::Overflow)?;
    let mut out = Vec::new();
    let mut x = offset;
    while x < end {
        let comp = layout.component_at(x).ok_or(MapError::Uncovered(x))?;
        if !comp.is_instantiated() {
            return Err(MapError::NotInstantiated {
                id: comp.id,
                start: comp.start,
            });
        }
        let stop = end.min(comp.end);
        while x < stop {
            let (stripe, object_offset, chunk_left) = locate(comp, x);
            let n = chunk_left.min(stop - x);
            let ost = comp
                .osts
                .get(stripe as usize)
                .copied()
                .ok_or(MapError::Uncovered(x))?;
            out.push(Piece {
                ost,
                object: comp.object(fid, stripe),
                object_offset,
                file_offset: x,
                len: n,
                compress: comp.compress,
            });
            x += n;
        }
    }
    Ok(out)
}

/// The stripe, object offset and bytes left in the chunk for file offset `x` in `comp`.
fn locate(comp: &LayoutComponent, x: u64) -> (u32, u64, u64) {
    let s = comp.stripe_size.max(1);
    let n = (comp.osts.len() as u64).max(1);
    let rel = x - comp.start;
    let chunk = rel / s;
    let within = rel % s;
    ((chunk % n) as u32, (chunk / n) * s + within, s - within)
}

/// The size stripe `stripe` of `comp` must have for the file to be `file_size` bytes long
/// (used by truncate to punch every object).
pub fn object_size_for(comp: &LayoutComponent, stripe: u32, file_size: u64) -> u64 {
    if file_size <= comp.start {
        return 0;
    }
    let s = comp.stripe_size.max(1);
    let n = (comp.osts.len() as u64).max(1);
    let rel = file_size.min(comp.end) - comp.start;
    let (chunks, rem) = (rel / s, rel % s);
    let (full_rounds, extra) = (chunks / n, chunks % n);
    let i = u64::from(stripe);
    let tail = if i < extra {
        s
    } else if i == extra {
        rem
    } else {
        0
    };
    full_rounds * s + tail
}

/// The file size implied by stripe `stripe` of `comp` holding `object_size` bytes: one past
/// the file offset of its last byte (used by glimpse).
pub fn file_end_for(comp: &LayoutComponent, stripe: u32, object_size: u64) -> u64 {
    if object_size == 0 {
        return 0;
    }
    let s = comp.stripe_size.max(1);
    let n = (comp.osts.len() as u64).max(1);
    let last = object_size - 1;
    let (round, within) = (last / s, last % s);
    let chunk = round.saturating_mul(n).saturating_add(u64::from(stripe));
    comp.start
        .saturating_add(chunk.saturating_mul(s))
        .saturating_add(within)
        .saturating_add(1)
}

/// The first offset of stripe `stripe`'s object in `comp` that holds a file byte at or
/// after file offset `x` (`x` at or past `comp.start`). With [`file_offset_of`], this
/// turns a search of the file from `x` (SEEK_DATA, SEEK_HOLE) into one search per object.
pub fn object_offset_from(comp: &LayoutComponent, stripe: u32, x: u64) -> u64 {
    let s = comp.stripe_size.max(1);
    let n = (comp.osts.len() as u64).max(1);
    let rel = x.saturating_sub(comp.start);
    let (chunk, within) = (rel / s, rel % s);
    let (round, on) = (chunk / n, chunk % n);
    let stripe = u64::from(stripe);
    match on.cmp(&stripe) {
        std::cmp::Ordering::Equal => round * s + within,
        // The stripe's chunk of this round comes later in the file.
        std::cmp::Ordering::Less => round * s,
        std::cmp::Ordering::Greater => (round + 1) * s,
    }
}

/// The file offset of byte `object_offset` of stripe `stripe`'s object in `comp` (past
/// the component's end when the object holds more than the component covers).
pub fn file_offset_of(comp: &LayoutComponent, stripe: u32, object_offset: u64) -> u64 {
    let s = comp.stripe_size.max(1);
    let n = (comp.osts.len() as u64).max(1);
    let (round, within) = (object_offset / s, object_offset % s);
    let chunk = round.saturating_mul(n).saturating_add(u64::from(stripe));
    comp.start
        .saturating_add(chunk.saturating_mul(s))
        .saturating_add(within)
}

/// A run of a range mapped by [`map_sparse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Span {
    /// Bytes held by objects.
    Data(Vec<Piece>),
    /// Bytes of a component with no objects yet: they read as zeros.
    Hole(u64),
}

/// Whether `[offset, offset + len)` reaches a component that is not instantiated.
pub fn has_hole(layout: &Layout, offset: u64, len: u64) -> bool {
    if len == 0 {
        return false;
    }
    let end = offset.saturating_add(len);
    layout
        .components
        .iter()
        .any(|c| c.start < end && offset < c.end && !c.is_instantiated())
}

/// Like [`map_range`], but extents of uninstantiated components become [`Span::Hole`]s
/// instead of an error (for reads). Adjacent data pieces are kept in one span.
pub fn map_sparse(layout: &Layout, fid: Fid, offset: u64, len: u64) -> Result<Vec<Span>, MapError> {
    let end = offset.checked_add(len).ok_or(MapError::Overflow)?;
    let mut out: Vec<Span> = Vec::new();
    let mut x = offset;
    while x < end {
        let comp = layout.component_at(x).ok_or(MapError::Uncovered(x))?;
        let stop = end.min(comp.end);
        if comp.is_instantiated() {
            let pieces = map_range(layout, fid, x, stop - x)?;
            match out.last_mut() {
                Some(Span::Data(p)) => p.extend(pieces),
                _ => out.push(Span::Data(pieces)),
            }
        } else {
            match out.last_mut() {
                Some(Span::Hole(n)) => *n += stop - x,
                _ => out.push(Span::Hole(stop - x)),
            }
        }
        x = stop;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use weft_proto::layout::EOF;

    fn comp(id: u32, start: u64, end: u64, s: u64, osts: Vec<u32>) -> LayoutComponent {
        LayoutComponent {
            id,
            start,
            end,
            stripe_size: s,
            stripe_count: osts.len() as i32,
            pool: None,
            osts,
            object_fid: None,
            compress: Compression::Inherit,
        }
    }

    /// The reference: where one byte lives, found by walking chunks one at a time.
    fn naive(layout: &Layout, x: u64) -> (u32, u32, u64) {
        let c = layout.component_at(x).unwrap();
        let mut pos = c.start;
        let mut per_stripe = vec![0u64; c.osts.len()];
        let mut stripe = 0usize;
        loop {
            let chunk_end = pos + c.stripe_size;
            if x < chunk_end {
                return (c.id, stripe as u32, per_stripe[stripe] + (x - pos));
            }
            per_stripe[stripe] += c.stripe_size;
            pos = chunk_end;
            stripe = (stripe + 1) % c.osts.len();
        }
    }

    /// The reference for truncate: walk the component chunk by chunk and count the bytes
    /// below `size` that land on `stripe`.
    fn naive_held(c: &LayoutComponent, stripe: u32, size: u64) -> u64 {
        let (mut pos, mut k, mut held) = (c.start, 0usize, 0);
        while pos < size.min(c.end) {
            let chunk_end = (pos + c.stripe_size).min(size).min(c.end);
            if k % c.osts.len() == stripe as usize {
                held += chunk_end - pos;
            }
            pos += c.stripe_size;
            k += 1;
        }
        held
    }

    fn arb_layout() -> impl Strategy<Value = Layout> {
        // Two components: [0, split) and [split, EOF), small stripe sizes to keep the model fast.
        (1u64..4, 1usize..5, 1u64..4, 1usize..5, 1u64..6).prop_map(|(s1, n1, s2, n2, rounds)| {
            let s1 = s1 * 64 * 1024;
            let s2 = s2 * 64 * 1024;
            let split = s1 * rounds * 2;
            Layout {
                generation: 1,
                components: vec![
                    comp(1, 0, split, s1, (0..n1 as u32).collect()),
                    comp(2, split, EOF, s2, (10..10 + n2 as u32).collect()),
                ],
            }
        })
    }

    proptest! {
        #[test]
        fn pieces_match_the_byte_model(layout in arb_layout(), offset in 0u64..3_000_000, len in 0u64..1_500_000) {
            let fid = Fid::ROOT;
            let pieces = map_range(&layout, fid, offset, len).unwrap();
            prop_assert_eq!(pieces.iter().map(|p| p.len).sum::<u64>(), len);
            let mut expect = offset;
            for p in &pieces {
                prop_assert_eq!(p.file_offset, expect);
                expect += p.len;
                // Check the first, last and a middle byte of each piece against the model.
                for d in [0, p.len / 2, p.len - 1] {
                    let (cid, stripe, ooff) = naive(&layout, p.file_offset + d);
                    prop_assert_eq!(p.object.component, cid);
                    prop_assert_eq!(p.object.stripe, stripe);
                    prop_assert_eq!(p.object_offset + d, ooff);
                }
            }
        }

        #[test]
        fn sparse_spans_cover_the_range_and_agree_with_the_model(layout in arb_layout(), first_missing in any::<bool>(), offset in 0u64..3_000_000, len in 0u64..1_500_000) {
            // Drop one component's OSTs: its bytes must come back as a hole, the other's as
            // the same pieces map_range gives.
            let mut layout = layout;
            let gone = usize::from(!first_missing);
            layout.components[gone].osts.clear();
            let spans = map_sparse(&layout, Fid::ROOT, offset, len).unwrap();
            let mut x = offset;
            for span in &spans {
                match span {
                    Span::Hole(n) => {
                        prop_assert!(*n > 0);
                        prop_assert_eq!(layout.component_at(x).map(|c| c.is_instantiated()), Some(false));
                        x += n;
                    }
                    Span::Data(pieces) => {
                        for p in pieces {
                            prop_assert_eq!(p.file_offset, x);
                            let (cid, stripe, ooff) = naive(&layout, x);
                            prop_assert_eq!((p.object.component, p.object.stripe, p.object_offset), (cid, stripe, ooff));
                            x += p.len;
                        }
                    }
                }
            }
            prop_assert_eq!(x, offset + len);
            prop_assert_eq!(has_hole(&layout, offset, len), spans.iter().any(|s| matches!(s, Span::Hole(_))));
        }

        #[test]
        fn truncate_sizes_and_glimpse_agree_with_the_model(layout in arb_layout(), size in 0u64..3_000_000) {
            let mut glimpsed = 0;
            for c in &layout.components {
                for i in 0..c.osts.len() as u32 {
                    let osize = object_size_for(c, i, size);
                    // The model: the object holds exactly the bytes of the file below `size`.
                    let held = naive_held(c, i, size);
                    prop_assert_eq!(osize, held);
                    glimpsed = glimpsed.max(file_end_for(c, i, osize));
                }
            }
            prop_assert_eq!(glimpsed, size);
        }
    }

    proptest! {
        #[test]
        fn object_offsets_found_from_a_file_offset_agree_with_the_model(layout in arb_layout(), x in 0u64..3_000_000) {
            let c = layout.component_at(x).unwrap().clone();
            for stripe in 0..c.osts.len() as u32 {
                let o = object_offset_from(&c, stripe, x);
                let f = file_offset_of(&c, stripe, o);
                // The byte found is on this stripe at that object offset, at or after x...
                prop_assert!(f >= x);
                if f < c.end {
                    let (cid, st, ooff) = naive(&layout, f);
                    prop_assert_eq!((cid, st, ooff), (c.id, stripe, o));
                }
                // ...and the stripe holds no byte in [x, f).
                let mut y = x;
                while y < f.min(c.end) {
                    prop_assert_ne!(naive(&layout, y).1, stripe);
                    y += (c.stripe_size / 4).max(1);
                }
            }
        }
    }

    #[test]
    fn an_uninstantiated_component_is_reported() {
        let layout = Layout {
            generation: 1,
            components: vec![
                comp(1, 0, 1 << 20, 1 << 20, vec![0]),
                comp(2, 1 << 20, EOF, 1 << 20, vec![]),
            ],
        };
        assert_eq!(map_range(&layout, Fid::ROOT, 0, 1 << 20).unwrap().len(), 1);
        assert_eq!(
            map_range(&layout, Fid::ROOT, 1000, 2 << 20),
            Err(MapError::NotInstantiated {
                id: 2,
                start: 1 << 20
            })
        );
    }
}
