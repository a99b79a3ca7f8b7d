//! Layout assignment for new regular files: inheriting a template and choosing OSTs.
//!
//! Templates inherit field by field, Lustre style: the request's template, else the parent
//! directory's default, else the root's default, else the file system's default; a zero
//! stripe count or size (or a missing pool, or compression left to inherit) is taken from
//! the next level that sets it, and finally from the built-in defaults (1 stripe of 1 MiB;
//! compression as each OST's `obdfilter.*.compress` says).
//!
//! OSTs are chosen round robin while free space is balanced, and weighted by free space once
//! the difference between the emptiest and the fullest OST exceeds [`QOS_THRESHOLD_PCT`]
//! percent of the largest free space (Lustre's `qos_threshold_rr`).

use crate::cluster::OstInfo;
use weft_proto::layout::{DEFAULT_STRIPE_SIZE, TemplateComponent};
use weft_proto::{Errno, Layout, LayoutComponent, LayoutTemplate, WireError};

/// Free-space imbalance (percent of the largest free space) above which allocation turns
/// from round robin to weighted random.
pub const QOS_THRESHOLD_PCT: u64 = 17;

/// Resolves a template chain (most specific first) into one template without zero fields.
/// Empty templates in the chain are skipped; an all-empty chain gives one default component.
pub fn resolve(chain: &[&LayoutTemplate]) -> LayoutTemplate {
    let mut levels = chain.iter().filter(|t| !t.components.is_empty());
    let Some(base) = levels.next() else {
        return LayoutTemplate::raid0(1, DEFAULT_STRIPE_SIZE, -1);
    };
    let rest: Vec<&LayoutTemplate> = levels.copied().collect();
    let mut start = 0u64;
    let mut components = Vec::with_capacity(base.components.len());
    for c in &base.components {
        let mut c = c.clone();
        for t in &rest {
            let Some(under) = component_at(t, start) else {
                continue;
            };
            if c.stripe_count == 0 {
                c.stripe_count = under.stripe_count;
            }
            if c.stripe_size == 0 {
                c.stripe_size = under.stripe_size;
            }
            if c.pool.is_none() {
                c.pool.clone_from(&under.pool);
            }
            c.compress = c.compress.or(under.compress);
        }
        if c.stripe_count == 0 {
            c.stripe_count = 1;
        }
        if c.stripe_size == 0 {
            c.stripe_size = DEFAULT_STRIPE_SIZE;
        }
        start = c.end;
        components.push(c);
    }
    LayoutTemplate { components }
}

fn component_at(t: &LayoutTemplate, offset: u64) -> Option<&TemplateComponent> {
    let mut start = 0u64;
    for c in &t.components {
        if start <= offset && offset < c.end {
            return Some(c);
        }
        start = c.end;
    }
    None
}

/// The OST allocator's state: the round-robin cursor and a small random generator.
#[derive(Debug)]
pub struct Placement {
    rr: u64,
    rng: u64,
}

impl Placement {
    /// A fresh allocator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            rr: 0,
            rng: seed | 1,
        }
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*: quality is ample for spreading stripes.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Builds a layout from a resolved template, instantiating the components that start at
    /// offset 0 and leaving later (PFL) components for first write. `first_id` is the id of
    /// the first component (ids are unique in a file's layout history).
    pub fn instantiate(
        &mut self,
        template: &LayoutTemplate,
        osts: &[OstInfo],
        pool: &dyn Fn(&str) -> Option<Vec<u32>>,
        first_id: u32,
        generation: u32,
    ) -> Result<Layout, WireError> {
        let mut components = Vec::with_capacity(template.components.len());
        let mut start = 0u64;
        for (i, c) in template.components.iter().enumerate() {
            let chosen = if start == 0 {
                self.choose(c, osts, pool)?
            } else {
                Vec::new()
            };
            let id = first_id.saturating_add(u32::try_from(i).unwrap_or(u32::MAX));
            components.push(LayoutComponent {
                id,
                start,
                end: c.end,
                stripe_size: c.stripe_size,
                stripe_count: c.stripe_count,
                pool: c.pool.clone(),
                osts: chosen,
                object_fid: None,
                compress: c.compress,
            });
            start = c.end;
        }
        let layout = Layout {
            generation,
            components,
        };
        layout
            .validate()
            .map_err(|e| WireError::new(Errno::Inval, e.to_string()))?;
        Ok(layout)
    }

    /// Chooses the OSTs of one component.
    pub fn choose(
        &mut self,
        c: &TemplateComponent,
        osts: &[OstInfo],
        pool: &dyn Fn(&str) -> Option<Vec<u32>>,
    ) -> Result<Vec<u32>, WireError> {
        if !c.ost_list.is_empty() {
            let mut seen = std::collections::BTreeSet::new();
            for &o in &c.ost_list {
                if !seen.insert(o) || !osts.iter().any(|x| x.index == o) {
                    return Err(WireError::new(Errno::Inval, format!("bad OST {o} in list")));
                }
            }
            return Ok(c.ost_list.clone());
        }
        let members = match &c.pool {
            Some(name) => Some(
                pool(name)
                    .ok_or_else(|| WireError::new(Errno::Inval, format!("no pool {name:?}")))?,
            ),
            None => None,
        };
        let member = |o: &&OstInfo| members.as_ref().is_none_or(|m| m.contains(&o.index));
        let mut cands: Vec<OstInfo> = osts
            .iter()
            .filter(|o| o.active && member(o))
            .copied()
            .collect();
        cands.sort_by_key(|o| o.index);
        cands.dedup_by_key(|o| o.index);
        if cands.is_empty() {
            // OSTs that stopped heartbeating (restarting, or cut off from the MGS) come
            // back: the client sends the create again (EINPROGRESS, as Lustre's MDT answers
            // while OST objects are not available) instead of failing it.
            let inactive = osts.iter().filter(member).count();
            if inactive > 0 {
                return Err(WireError::new(
                    Errno::InProgress,
                    format!("none of the {inactive} OSTs to place stripes on is active now"),
                ));
            }
            return Err(WireError::new(Errno::NoSpc, "no OST to place stripes on"));
        }
        let n = match c.stripe_count {
            -1 => cands.len(),
            k => usize::try_from(k).unwrap_or(1).clamp(1, cands.len()),
        };
        if let Ok(offset) = u32::try_from(c.stripe_offset) {
            let first = cands.iter().position(|o| o.index >= offset).unwrap_or(0);
            return Ok(take_ring(&cands, first, n));
        }
        if balanced(&cands) {
            let len = cands.len() as u64;
            let first = usize::try_from(self.rr % len).unwrap_or(0);
            self.rr = self.rr.wrapping_add(n as u64);
            return Ok(take_ring(&cands, first, n));
        }
        Ok(self.weighted(cands, n))
    }

    /// Picks `n` distinct OSTs with probability proportional to free space.
    fn weighted(&mut self, mut cands: Vec<OstInfo>, n: usize) -> Vec<u32> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n && !cands.is_empty() {
            // Every OST keeps a small weight so a full OST is still reachable when needed.
            let total: u128 = cands.iter().map(|o| u128::from(o.free_bytes) + 1).sum();
            let mut r = u128::from(self.next_random()) % total.max(1);
            let mut pick = cands.len() - 1;
            for (i, o) in cands.iter().enumerate() {
                let w = u128::from(o.free_bytes) + 1;
                if r < w {
                    pick = i;
                    break;
                }
                r -= w;
            }
            out.push(cands.swap_remove(pick).index);
        }
        out
    }
}

fn take_ring(cands: &[OstInfo], first: usize, n: usize) -> Vec<u32> {
    cands
        .iter()
        .cycle()
        .skip(first)
        .take(n)
        .map(|o| o.index)
        .collect()
}

/// Whether free space is balanced enough for round robin.
pub fn balanced(osts: &[OstInfo]) -> bool {
    let max = osts.iter().map(|o| o.free_bytes).max().unwrap_or(0);
    let min = osts.iter().map(|o| o.free_bytes).min().unwrap_or(0);
    u128::from(max - min) * 100 <= u128::from(max) * u128::from(QOS_THRESHOLD_PCT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_proto::layout::EOF;

    fn osts(free: &[u64]) -> Vec<OstInfo> {
        free.iter()
            .enumerate()
            .map(|(i, &f)| OstInfo {
                index: i as u32,
                active: true,
                free_bytes: f,
            })
            .collect()
    }

    fn no_pool(_: &str) -> Option<Vec<u32>> {
        None
    }

    #[test]
    fn zero_fields_inherit_from_the_next_level() {
        let file = LayoutTemplate::raid0(0, 4 << 20, -1);
        let dir = LayoutTemplate::raid0(3, 0, -1);
        let fs = LayoutTemplate::raid0(1, 2 << 20, -1);
        let r = resolve(&[&file, &LayoutTemplate::default(), &dir, &fs]);
        assert_eq!(r.components[0].stripe_count, 3);
        assert_eq!(r.components[0].stripe_size, 4 << 20);
        let d = resolve(&[]);
        assert_eq!(
            (d.components[0].stripe_count, d.components[0].stripe_size),
            (1, 1 << 20)
        );
    }

    #[test]
    fn round_robin_while_balanced() {
        let o = osts(&[100, 100, 95, 100]);
        let mut p = Placement::new(7);
        let t = LayoutTemplate::raid0(2, 1 << 20, -1);
        let a = p.instantiate(&t, &o, &no_pool, 1, 1).unwrap();
        let b = p.instantiate(&t, &o, &no_pool, 1, 1).unwrap();
        assert_eq!(a.components[0].osts, vec![0, 1]);
        assert_eq!(b.components[0].osts, vec![2, 3]);
    }

    #[test]
    fn weighted_by_free_space_when_imbalanced() {
        let o = osts(&[1000, 10, 10, 10]);
        assert!(!balanced(&o));
        let mut p = Placement::new(42);
        let c = &LayoutTemplate::raid0(1, 1 << 20, -1).components[0];
        let mut hits = [0u32; 4];
        for _ in 0..1000 {
            let v = p.choose(c, &o, &no_pool).unwrap();
            hits[v[0] as usize] += 1;
        }
        assert!(hits[0] > 900, "{hits:?}");
        // Never the same OST twice in one component.
        let all = p.choose(
            &LayoutTemplate::raid0(-1, 1 << 20, -1).components[0],
            &o,
            &no_pool,
        );
        let mut v = all.unwrap();
        v.sort();
        assert_eq!(v, vec![0, 1, 2, 3]);
    }

    #[test]
    fn offsets_lists_pools_and_clamping() {
        let mut o = osts(&[5, 5, 5, 5]);
        o[1].active = false;
        let mut p = Placement::new(1);
        let c = |count, offset| LayoutTemplate::raid0(count, 1 << 20, offset).components[0].clone();
        assert_eq!(p.choose(&c(2, 2), &o, &no_pool).unwrap(), vec![2, 3]);
        assert_eq!(p.choose(&c(3, 3), &o, &no_pool).unwrap(), vec![3, 0, 2]);
        assert_eq!(p.choose(&c(9, -1), &o, &no_pool).unwrap().len(), 3);
        let mut listed = c(0, -1);
        listed.ost_list = vec![3, 1];
        assert_eq!(p.choose(&listed, &o, &no_pool).unwrap(), vec![3, 1]);
        listed.ost_list = vec![3, 3];
        assert_eq!(
            p.choose(&listed, &o, &no_pool).unwrap_err().errno,
            Errno::Inval
        );
        let mut pooled = c(-1, -1);
        pooled.pool = Some("fast".into());
        let pools = |n: &str| (n == "fast").then(|| vec![1, 2, 3]);
        let mut v = p.choose(&pooled, &o, &pools).unwrap();
        v.sort();
        assert_eq!(v, vec![2, 3]);
        pooled.pool = Some("nope".into());
        assert_eq!(
            p.choose(&pooled, &o, &pools).unwrap_err().errno,
            Errno::Inval
        );
        assert_eq!(
            p.choose(&c(1, -1), &[], &no_pool).unwrap_err().errno,
            Errno::NoSpc
        );
        // Every OST inactive (not heard from lately): wait for them, do not fail.
        let mut down = osts(&[5, 5]);
        down.iter_mut().for_each(|o| o.active = false);
        assert_eq!(
            p.choose(&c(1, -1), &down, &no_pool).unwrap_err().errno,
            Errno::InProgress
        );
    }

    #[test]
    fn only_the_first_pfl_component_is_instantiated() {
        let t = LayoutTemplate {
            components: vec![
                TemplateComponent {
                    end: 64 << 20,
                    stripe_count: 1,
                    stripe_size: 1 << 20,
                    stripe_offset: -1,
                    ..Default::default()
                },
                TemplateComponent {
                    end: EOF,
                    stripe_count: -1,
                    stripe_size: 4 << 20,
                    stripe_offset: -1,
                    ..Default::default()
                },
            ],
        };
        let l = Placement::new(3)
            .instantiate(&t, &osts(&[1, 1, 1]), &no_pool, 1, 1)
            .unwrap();
        assert_eq!(l.components[0].osts.len(), 1);
        assert!(l.components[1].osts.is_empty());
        assert_eq!((l.components[0].id, l.components[1].id), (1, 2));
        assert_eq!(l.components[1].start, 64 << 20);
    }
}
