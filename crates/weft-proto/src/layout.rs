//! File layouts: how a file's bytes are striped over OST objects.
//!
//! A layout is a list of components, each covering an extent `[start, end)` of the file with
//! its own RAID0 striping (Lustre's PFL). A plain striped file has one component covering
//! `[0, EOF)`. Components are instantiated (OSTs chosen) when created or on first write into
//! their extent; mirrors (FLR) will add components that overlap, so nothing here assumes
//! extents are disjoint beyond what [`Layout::validate`] checks today.

use crate::fid::{Fid, ObjectId};
use serde::{Deserialize, Serialize};

/// Stripe sizes must be a multiple of this (64 KiB), as in Lustre.
pub const STRIPE_SIZE_UNIT: u64 = 64 << 10;
/// The default stripe size when neither the directory nor the file system sets one (1 MiB).
pub const DEFAULT_STRIPE_SIZE: u64 = 1 << 20;
/// Largest stripe size accepted (4 GiB).
pub const MAX_STRIPE_SIZE: u64 = 4 << 30;
/// Most stripes (and components) one layout may have.
pub const MAX_STRIPE_COUNT: u32 = 2000;
/// Most components in one layout.
pub const MAX_COMPONENTS: usize = 64;
/// An extent end meaning "to the end of the file, however large".
pub const EOF: u64 = u64::MAX;

/// A file's layout: its components in extent order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// Incremented whenever the layout changes (component instantiated, migration).
    pub generation: u32,
    /// The components, sorted by extent start.
    pub components: Vec<LayoutComponent>,
}

/// One component: a RAID0 striping of the extent `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutComponent {
    /// Component id, unique in the file's layout history; part of each object's name.
    pub id: u32,
    /// First byte covered.
    pub start: u64,
    /// One past the last byte covered ([`EOF`] for "to the end").
    pub end: u64,
    /// Bytes per stripe chunk, a multiple of [`STRIPE_SIZE_UNIT`].
    pub stripe_size: u64,
    /// Number of stripes the component was asked for (-1 = every OST).
    pub stripe_count: i32,
    /// OST pool the stripes were drawn from, if any.
    pub pool: Option<String>,
    /// The OST of each stripe, in stripe order; empty until the component is instantiated.
    pub osts: Vec<u32>,
    /// The FID the component's objects are named under when it is not the file's own: a
    /// component moved to this file by a layout swap (`weft migrate`) keeps its objects.
    #[serde(default)]
    pub object_fid: Option<Fid>,
    /// Whether the component's objects are compressed when they are created
    /// (`weft setstripe --compress`). (Defaults when absent from JSON, as in MGS state
    /// files written before it existed.)
    #[serde(default)]
    pub compress: Compression,
}

/// Compression of a component's OST objects, decided when each object is created
/// (Lustre's `lfs setstripe --compress`): objects that exist keep their form.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Compression {
    /// In a template: what the parent directory or the file system says. In a file's
    /// layout: what the OST says (`obdfilter.*.compress`).
    #[default]
    Inherit,
    /// Plain objects, whatever the OST says.
    Off,
    /// LZ4, in 64 KiB chunks, whatever the OST says.
    Lz4,
}

impl Compression {
    /// What an OST creating an object is told: `None` leaves it to the OST's setting.
    pub fn wanted(self) -> Option<bool> {
        match self {
            Compression::Inherit => None,
            Compression::Off => Some(false),
            Compression::Lz4 => Some(true),
        }
    }

    /// `self`, or `parent` where `self` inherits.
    pub fn or(self, parent: Compression) -> Compression {
        match self {
            Compression::Inherit => parent,
            set => set,
        }
    }
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Compression::Inherit => "inherit",
            Compression::Off => "none",
            Compression::Lz4 => "lz4",
        })
    }
}

impl std::str::FromStr for Compression {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "lz4" => Ok(Compression::Lz4),
            "none" | "off" => Ok(Compression::Off),
            "inherit" => Ok(Compression::Inherit),
            other => Err(format!(
                "unknown compression {other:?} (lz4, none or inherit)"
            )),
        }
    }
}

impl LayoutComponent {
    /// Whether OSTs have been chosen for this component.
    pub fn is_instantiated(&self) -> bool {
        !self.osts.is_empty()
    }

    /// The object holding stripe `stripe` of this component for file `fid`.
    pub fn object(&self, fid: Fid, stripe: u32) -> ObjectId {
        ObjectId {
            fid: self.object_fid.unwrap_or(fid),
            component: self.id,
            stripe,
        }
    }
}

/// Why a layout or template was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// Stripe size zero, not a multiple of 64 KiB, or too large.
    #[error("stripe size {0} is not a positive multiple of 64 KiB up to 4 GiB")]
    StripeSize(u64),
    /// A stripe count below -1 or above the maximum.
    #[error("stripe count {0} is out of range")]
    StripeCount(i32),
    /// Components overlap, leave a gap, or an extent is empty or unaligned.
    #[error("component extents are not contiguous, increasing and stripe-aligned")]
    Extents,
    /// Too many components.
    #[error("too many layout components")]
    TooManyComponents,
    /// A layout with no component.
    #[error("layout has no component")]
    Empty,
}

impl Layout {
    /// Checks the invariants every stored layout must hold: components contiguous from 0,
    /// extents increasing and aligned to the stripe size, stripe sizes and counts in range.
    pub fn validate(&self) -> Result<(), LayoutError> {
        if self.components.is_empty() {
            return Err(LayoutError::Empty);
        }
        if self.components.len() > MAX_COMPONENTS {
            return Err(LayoutError::TooManyComponents);
        }
        let mut expect_start = 0u64;
        for c in &self.components {
            check_stripe_size(c.stripe_size)?;
            check_stripe_count(c.stripe_count)?;
            if c.osts.len() > MAX_STRIPE_COUNT as usize {
                return Err(LayoutError::StripeCount(i32::MAX));
            }
            if c.start != expect_start || c.end <= c.start {
                return Err(LayoutError::Extents);
            }
            if c.end != EOF && !c.end.is_multiple_of(c.stripe_size) {
                return Err(LayoutError::Extents);
            }
            expect_start = c.end;
        }
        if expect_start != EOF {
            return Err(LayoutError::Extents);
        }
        Ok(())
    }

    /// The component covering byte `offset`, if any.
    pub fn component_at(&self, offset: u64) -> Option<&LayoutComponent> {
        self.components
            .iter()
            .find(|c| c.start <= offset && offset < c.end)
    }

    /// Every object the layout has instantiated: what must be destroyed with the file.
    pub fn objects(&self, fid: Fid) -> impl Iterator<Item = (u32, ObjectId)> + '_ {
        self.components.iter().flat_map(move |c| {
            c.osts
                .iter()
                .enumerate()
                .map(move |(i, &ost)| (ost, c.object(fid, i as u32)))
        })
    }
}

/// A default layout, as set on a directory (`weft setstripe DIR`) or the file system:
/// zero fields mean "inherit".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutTemplate {
    /// Components of the template; one open-ended component for a plain RAID0 default.
    pub components: Vec<TemplateComponent>,
}

/// One component of a [`LayoutTemplate`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateComponent {
    /// One past the last byte covered ([`EOF`] for the last component).
    pub end: u64,
    /// Stripe count: 0 inherit, -1 all OSTs, else that many.
    pub stripe_count: i32,
    /// Stripe size: 0 inherit.
    pub stripe_size: u64,
    /// First OST: -1 lets the allocator choose.
    pub stripe_offset: i32,
    /// Explicit OST list (`setstripe -o`); empty lets the allocator choose.
    pub ost_list: Vec<u32>,
    /// Pool to draw OSTs from.
    pub pool: Option<String>,
    /// Compression of the component's objects: `Inherit` takes the parent's. (Defaults
    /// when absent from JSON, as in MGS state files written before it existed.)
    #[serde(default)]
    pub compress: Compression,
}

impl LayoutTemplate {
    /// A plain RAID0 template.
    pub fn raid0(stripe_count: i32, stripe_size: u64, stripe_offset: i32) -> Self {
        Self {
            components: vec![TemplateComponent {
                end: EOF,
                stripe_count,
                stripe_size,
                stripe_offset,
                ost_list: Vec::new(),
                pool: None,
                compress: Compression::Inherit,
            }],
        }
    }

    /// Checks ranges: counts, sizes (0 allowed = inherit) and extent order.
    pub fn validate(&self) -> Result<(), LayoutError> {
        if self.components.is_empty() {
            return Err(LayoutError::Empty);
        }
        if self.components.len() > MAX_COMPONENTS {
            return Err(LayoutError::TooManyComponents);
        }
        let mut prev_end = 0u64;
        for (i, c) in self.components.iter().enumerate() {
            if c.stripe_size != 0 {
                check_stripe_size(c.stripe_size)?;
            }
            check_stripe_count(c.stripe_count)?;
            if c.ost_list.len() > MAX_STRIPE_COUNT as usize || c.stripe_offset < -1 {
                return Err(LayoutError::StripeCount(c.stripe_count));
            }
            let last = i + 1 == self.components.len();
            if c.end <= prev_end || (last && c.end != EOF) || (!last && c.end == EOF) {
                return Err(LayoutError::Extents);
            }
            if c.end != EOF && !c.end.is_multiple_of(STRIPE_SIZE_UNIT) {
                return Err(LayoutError::Extents);
            }
            prev_end = c.end;
        }
        Ok(())
    }
}

fn check_stripe_size(size: u64) -> Result<(), LayoutError> {
    if size == 0 || !size.is_multiple_of(STRIPE_SIZE_UNIT) || size > MAX_STRIPE_SIZE {
        return Err(LayoutError::StripeSize(size));
    }
    Ok(())
}

fn check_stripe_count(count: i32) -> Result<(), LayoutError> {
    if count < -1 || count > MAX_STRIPE_COUNT as i32 {
        return Err(LayoutError::StripeCount(count));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comp(id: u32, start: u64, end: u64) -> LayoutComponent {
        LayoutComponent {
            id,
            start,
            end,
            stripe_size: 1 << 20,
            stripe_count: 2,
            pool: None,
            osts: vec![0, 1],
            object_fid: None,
            compress: Compression::Inherit,
        }
    }

    #[test]
    fn contiguous_components_validate() {
        let l = Layout {
            generation: 1,
            components: vec![comp(1, 0, 64 << 20), comp(2, 64 << 20, EOF)],
        };
        assert_eq!(l.validate(), Ok(()));
        assert_eq!(l.component_at(64 << 20).map(|c| c.id), Some(2));
        assert_eq!(l.objects(Fid::ROOT).count(), 4);
    }

    #[test]
    fn gaps_and_bad_sizes_are_refused() {
        let gap = Layout {
            generation: 1,
            components: vec![comp(1, 0, 1 << 20), comp(2, 2 << 20, EOF)],
        };
        assert_eq!(gap.validate(), Err(LayoutError::Extents));
        let mut bad = comp(1, 0, EOF);
        bad.stripe_size = 1000;
        assert_eq!(
            Layout {
                generation: 1,
                components: vec![bad]
            }
            .validate(),
            Err(LayoutError::StripeSize(1000))
        );
        assert_eq!(
            LayoutTemplate::raid0(-2, 0, -1).validate(),
            Err(LayoutError::StripeCount(-2))
        );
        assert_eq!(LayoutTemplate::raid0(-1, 4 << 20, -1).validate(), Ok(()));
    }
}
