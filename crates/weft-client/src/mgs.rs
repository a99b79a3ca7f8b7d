//! Typed access to the MGS.

use crate::error::ClientError;
use bytes::Bytes;
use uuid::Uuid;
use weft_proto::layout::LayoutTemplate;
use weft_proto::mgs::{FsConfig, MgsReply, MgsRequest};
use weft_proto::{FidSeqRange, TargetId};
use weft_rpc::Reconnecting;

/// A client of the management service.
pub struct MgsClient {
    conn: Reconnecting,
}

impl MgsClient {
    /// Wraps a (reconnecting) connection to the MGS.
    pub fn new(conn: Reconnecting) -> Self {
        Self { conn }
    }

    /// The underlying connection.
    pub fn connection(&self) -> &Reconnecting {
        &self.conn
    }

    async fn call(&self, req: MgsRequest) -> Result<MgsReply, ClientError> {
        self.conn
            .call(&req, Bytes::new())
            .await
            .map(|(r, _)| r)
            .map_err(|error| ClientError::Rpc {
                target: TargetId::MGS,
                error,
            })
    }

    fn unexpected(op: &'static str) -> ClientError {
        ClientError::UnexpectedReply {
            target: TargetId::MGS,
            op,
        }
    }

    async fn call_ok(&self, req: MgsRequest, op: &'static str) -> Result<(), ClientError> {
        match self.call(req).await? {
            MgsReply::Ok => Ok(()),
            _ => Err(Self::unexpected(op)),
        }
    }

    /// Registers a target; returns the configuration.
    pub async fn register(
        &self,
        id: TargetId,
        uuid: Uuid,
        address: String,
        failover: Vec<String>,
        replace: bool,
    ) -> Result<FsConfig, ClientError> {
        match self
            .call(MgsRequest::Register {
                id,
                uuid,
                address,
                failover,
                replace,
            })
            .await?
        {
            MgsReply::Registered(c) | MgsReply::Config(c) => Ok(c),
            _ => Err(Self::unexpected("register")),
        }
    }

    /// Tells the MGS a target is alive.
    pub async fn heartbeat(&self, id: TargetId, uuid: Uuid) -> Result<(), ClientError> {
        self.call_ok(MgsRequest::Heartbeat { id, uuid }, "heartbeat")
            .await
    }

    /// The whole configuration.
    pub async fn config(&self) -> Result<FsConfig, ClientError> {
        match self.call(MgsRequest::GetConfig).await? {
            MgsReply::Config(c) | MgsReply::Registered(c) => Ok(c),
            _ => Err(Self::unexpected("getconfig")),
        }
    }

    /// The configuration if its version is not `have`; `None` if it is. An MGS that does
    /// not know the request (an older one) is asked for the whole configuration instead.
    pub async fn config_if_newer(&self, have: u64) -> Result<Option<FsConfig>, ClientError> {
        match self.call(MgsRequest::GetConfigIfNewer { have }).await {
            Ok(MgsReply::Config(c)) => Ok(Some(c)),
            Ok(MgsReply::Ok) => Ok(None),
            Ok(_) => Err(Self::unexpected("getconfig_if_newer")),
            Err(ClientError::Remote(_)) => {
                let c = self.config().await?;
                Ok((c.version != have).then_some(c))
            }
            Err(e) => Err(e),
        }
    }

    /// New FID sequences for an MDT.
    pub async fn alloc_seq(&self, mdt: u32, count: u32) -> Result<FidSeqRange, ClientError> {
        match self.call(MgsRequest::AllocSeq { mdt, count }).await? {
            MgsReply::Seq(r) => Ok(r),
            _ => Err(Self::unexpected("allocseq")),
        }
    }

    /// Sets or removes a persistent parameter.
    pub async fn set_param(&self, name: String, value: Option<String>) -> Result<(), ClientError> {
        self.call_ok(MgsRequest::SetParam { name, value }, "setparam")
            .await
    }

    /// Creates a pool.
    pub async fn pool_new(&self, pool: String) -> Result<(), ClientError> {
        self.call_ok(MgsRequest::PoolNew { pool }, "pool_new").await
    }

    /// Adds OSTs to a pool.
    pub async fn pool_add(&self, pool: String, osts: Vec<u32>) -> Result<(), ClientError> {
        self.call_ok(MgsRequest::PoolAdd { pool, osts }, "pool_add")
            .await
    }

    /// Removes OSTs from a pool.
    pub async fn pool_remove(&self, pool: String, osts: Vec<u32>) -> Result<(), ClientError> {
        self.call_ok(MgsRequest::PoolRemove { pool, osts }, "pool_remove")
            .await
    }

    /// Deletes an empty pool.
    pub async fn pool_destroy(&self, pool: String) -> Result<(), ClientError> {
        self.call_ok(MgsRequest::PoolDestroy { pool }, "pool_destroy")
            .await
    }

    /// Sets the file system's default layout.
    pub async fn set_default_layout(&self, template: LayoutTemplate) -> Result<(), ClientError> {
        self.call_ok(
            MgsRequest::SetDefaultLayout { template },
            "set_default_layout",
        )
        .await
    }
}
