//! Test data whose every byte can be checked: a deterministic pattern of the position in
//! the file and a seed, never zero (so that a hole or a lost write cannot pass for data).

/// `len` bytes of the pattern of `seed` as they stand at file offset `offset` and on: any
/// part of a file written with the pattern can be checked on its own.
pub fn pattern(offset: u64, len: usize, seed: u64) -> Vec<u8> {
    let mix = seed.wrapping_mul(0xD6E8_FEB8_6659_FD93) | 1;
    (offset..offset + len as u64)
        .map(|i| ((i.wrapping_add(mix).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8) | 1)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::pattern;

    #[test]
    fn parts_of_a_pattern_match_the_whole_and_seeds_differ() {
        let whole = pattern(0, 10_000, 7);
        assert_eq!(pattern(1234, 100, 7), whole[1234..1334]);
        assert!(whole.iter().all(|b| *b != 0));
        assert_ne!(pattern(0, 4096, 7), pattern(0, 4096, 8));
        // Not a short period: 4 KiB blocks at different offsets differ.
        assert_ne!(whole[..4096], whole[4096..8192]);
    }
}
