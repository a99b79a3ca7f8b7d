//! The MDT calls an open file makes ([`FileMeta`]): reopen, layout, PFL instantiation,
//! size merges, truncate's setattr and close. [`MdtClient`] is the real one; tests run a
//! [`File`](super::File) over a fake, with fake object I/O under the client.

use crate::error::ClientError;
use crate::mdt::{MdtClient, Opened};
use futures::FutureExt;
use futures::future::BoxFuture;
use weft_proto::Fid;
use weft_proto::layout::Layout;
use weft_proto::mdt::{Attr, Credentials, OpenFlags, SetAttr};

/// What an open file asks of its MDT. Metadata calls, off the data path: each returns a
/// boxed future, so the trait stays object-safe.
pub trait FileMeta: Send + Sync + 'static {
    /// Opens `fid` again (after the MDT lost the handle).
    fn open<'a>(
        &'a self,
        fid: Fid,
        flags: OpenFlags,
        cred: &'a Credentials,
    ) -> BoxFuture<'a, Result<Opened, ClientError>>;

    /// The file's current layout.
    fn get_layout(&self, fid: Fid) -> BoxFuture<'_, Result<Option<Layout>, ClientError>>;

    /// Instantiates the components of the layout of open `handle` overlapping
    /// `[start, end)`; the layout after.
    fn instantiate(
        &self,
        handle: u64,
        start: u64,
        end: u64,
    ) -> BoxFuture<'_, Result<Option<Layout>, ClientError>>;

    /// Records the size and blocks a writer saw, keeping the handle open.
    fn size_merge(
        &self,
        handle: u64,
        size: Option<u64>,
        blocks: Option<u64>,
        modified: bool,
    ) -> BoxFuture<'_, Result<(), ClientError>>;

    /// Changes attributes (truncate sets the size).
    fn setattr<'a>(
        &'a self,
        fid: Fid,
        set: SetAttr,
        cred: &'a Credentials,
    ) -> BoxFuture<'a, Result<Attr, ClientError>>;

    /// Closes the handle, recording the size and blocks a writer saw.
    fn close(
        &self,
        handle: u64,
        size: Option<u64>,
        blocks: Option<u64>,
        modified: bool,
    ) -> BoxFuture<'_, Result<(), ClientError>>;

    /// Waits until bytes `[start, end)` of released file `fid` are restored from its
    /// archive; true when the whole file is (it is no longer released).
    fn hsm_restore(
        &self,
        fid: Fid,
        start: u64,
        end: u64,
    ) -> BoxFuture<'_, Result<bool, ClientError>>;
}

impl FileMeta for MdtClient {
    fn open<'a>(
        &'a self,
        fid: Fid,
        flags: OpenFlags,
        cred: &'a Credentials,
    ) -> BoxFuture<'a, Result<Opened, ClientError>> {
        MdtClient::open(self, fid, flags, cred).boxed()
    }

    fn get_layout(&self, fid: Fid) -> BoxFuture<'_, Result<Option<Layout>, ClientError>> {
        MdtClient::get_layout(self, fid).boxed()
    }

    fn instantiate(
        &self,
        handle: u64,
        start: u64,
        end: u64,
    ) -> BoxFuture<'_, Result<Option<Layout>, ClientError>> {
        MdtClient::instantiate(self, handle, start, end).boxed()
    }

    fn size_merge(
        &self,
        handle: u64,
        size: Option<u64>,
        blocks: Option<u64>,
        modified: bool,
    ) -> BoxFuture<'_, Result<(), ClientError>> {
        MdtClient::size_merge(self, handle, size, blocks, modified).boxed()
    }

    fn setattr<'a>(
        &'a self,
        fid: Fid,
        set: SetAttr,
        cred: &'a Credentials,
    ) -> BoxFuture<'a, Result<Attr, ClientError>> {
        MdtClient::setattr(self, fid, set, cred).boxed()
    }

    fn close(
        &self,
        handle: u64,
        size: Option<u64>,
        blocks: Option<u64>,
        modified: bool,
    ) -> BoxFuture<'_, Result<(), ClientError>> {
        MdtClient::close(self, handle, size, blocks, modified).boxed()
    }

    fn hsm_restore(
        &self,
        fid: Fid,
        start: u64,
        end: u64,
    ) -> BoxFuture<'_, Result<bool, ClientError>> {
        MdtClient::hsm_restore(self, fid, start, end).boxed()
    }
}
