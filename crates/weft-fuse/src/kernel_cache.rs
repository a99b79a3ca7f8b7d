//! The mount's seam to the kernel's caches: what the operations and the page-cache bound
//! ask the kernel to forget (the adapter implements it with fuser's notifier).

/// What the operations ask of the kernel's caches (the adapter tells the kernel).
pub trait KernelCache: Send + Sync {
    /// Makes the kernel ask for `ino`'s attributes again at their next use.
    fn forget_attributes(&self, ino: u64);
    /// Makes the kernel drop the pages it caches of `len` bytes of `ino` from `offset`.
    fn drop_pages(&self, ino: u64, offset: u64, len: u64);
}
