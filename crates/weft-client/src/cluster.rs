//! A client's view of the file system: the configuration from the MGS, kept current by its
//! callbacks, and one lazily connected client per target.

use crate::changes::Changes;
use crate::error::ClientError;
use crate::mdt::MdtClient;
use crate::mgs::MgsClient;
use crate::ost::OstClient;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use tokio::sync::mpsc;
use uuid::Uuid;
use weft_proto::handshake::FEATURES_SUPPORTED;
use weft_proto::mgs::{FsConfig, MgsCallback};
use weft_proto::{ConnectRequest, Fid, PROTOCOL_VERSION, TargetId, TargetKind};
use weft_rpc::{
    CallbackHandler, ClientOptions, ClientSession, Reconnecting, TcpTransport, Transport,
};

/// How a client connects.
#[derive(Clone)]
pub struct ClusterOptions {
    /// Timeouts of every connection.
    pub rpc: ClientOptions,
    /// This node's identity in handshakes.
    pub node_uuid: Uuid,
    /// How connections are made (TCP unless a test injects faults).
    pub transport: Arc<dyn Transport>,
    /// This node's eviction epoch, shared by all its connections (see
    /// [`weft_rpc::session`]).
    pub session: Arc<ClientSession>,
}

impl std::fmt::Debug for ClusterOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterOptions")
            .field("rpc", &self.rpc)
            .field("node_uuid", &self.node_uuid)
            .finish_non_exhaustive()
    }
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            rpc: ClientOptions::default(),
            node_uuid: Uuid::new_v4(),
            transport: Arc::new(TcpTransport),
            session: Arc::default(),
        }
    }
}

/// The connected file system.
pub struct Cluster {
    fsname: String,
    opts: ClusterOptions,
    transport: Arc<dyn Transport>,
    mgs: MgsClient,
    config: RwLock<Arc<FsConfig>>,
    /// The version of `config`, for those who act on changes ([`Cluster::watch_config`]).
    version: tokio::sync::watch::Sender<u64>,
    mdts: RwLock<HashMap<u32, Arc<MdtClient>>>,
    /// Requests sent to any MDT that may change names or attributes, tracked at their
    /// start and at their end ([`Cluster::changes`]).
    changes: Arc<Changes>,
    osts: RwLock<HashMap<u32, Arc<OstClient>>>,
}

/// Forwards MGS callbacks to the refresh task.
struct ConfigWatcher(mpsc::UnboundedSender<u64>);

impl CallbackHandler for ConfigWatcher {
    fn on_callback(&self, _opcode: u16, body: &[u8]) {
        match weft_proto::decode::<MgsCallback>(body) {
            Ok(MgsCallback::ConfigChanged { version }) => {
                let _ = self.0.send(version);
            }
            Err(e) => tracing::warn!(error = %e, "malformed callback from the MGS"),
        }
    }
}

/// A (lazily connecting) client of the MGS at `addr` for file system `fsname`.
fn mgs_client(
    opts: &ClusterOptions,
    addr: &str,
    fsname: &str,
    callbacks: Option<Arc<dyn CallbackHandler>>,
) -> MgsClient {
    let hello = ConnectRequest {
        fsname: fsname.to_string(),
        client_uuid: opts.node_uuid,
        protocol_version: PROTOCOL_VERSION,
        features: FEATURES_SUPPORTED,
        target: TargetId::MGS,
    };
    MgsClient::new(
        Reconnecting::new(
            opts.transport.clone(),
            addr.to_string(),
            hello,
            callbacks,
            opts.rpc.clone(),
        )
        .with_session(opts.session.clone()),
    )
}

impl Cluster {
    /// Connects to the MGS at `mgs_addr` and fetches the configuration of file system
    /// `fsname` (empty: whichever file system that MGS serves, as servers do at start).
    pub async fn connect(
        mgs_addr: &str,
        fsname: &str,
        opts: ClusterOptions,
    ) -> Result<Arc<Self>, ClientError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mgs = mgs_client(&opts, mgs_addr, fsname, Some(Arc::new(ConfigWatcher(tx))));
        let config = mgs.config().await?;
        if !fsname.is_empty() && config.fsname != fsname {
            return Err(ClientError::Invalid(format!(
                "MGS serves file system '{}', not '{fsname}'",
                config.fsname
            )));
        }
        let cluster = Arc::new(Self::with_config(opts, mgs, config));
        tokio::spawn(refresh_on_callbacks(Arc::downgrade(&cluster), rx));
        Ok(cluster)
    }

    /// A cluster with an empty configuration that has not contacted its MGS (nor will: no
    /// callbacks are followed) and knows no targets: under a client whose object I/O is a
    /// fake ([`crate::Client::offline`]).
    pub fn offline(opts: ClusterOptions) -> Arc<Self> {
        let mgs = mgs_client(&opts, "", "", None);
        let config = FsConfig {
            fsname: String::new(),
            fs_uuid: Uuid::nil(),
            version: 0,
            targets: Vec::new(),
            params: Default::default(),
            pools: Default::default(),
            fld: Vec::new(),
            default_layout: Default::default(),
            repos: Vec::new(),
        };
        Arc::new(Self::with_config(opts, mgs, config))
    }

    fn with_config(opts: ClusterOptions, mgs: MgsClient, config: FsConfig) -> Self {
        Self {
            fsname: config.fsname.clone(),
            transport: opts.transport.clone(),
            opts,
            mgs,
            version: tokio::sync::watch::Sender::new(config.version),
            config: RwLock::new(Arc::new(config)),
            mdts: RwLock::default(),
            changes: Arc::default(),
            osts: RwLock::default(),
        }
    }

    /// The file system's name.
    pub fn fsname(&self) -> &str {
        &self.fsname
    }

    /// This node's UUID.
    pub fn node_uuid(&self) -> Uuid {
        self.opts.node_uuid
    }

    /// This node's eviction epoch: files opened in an older one lost their cached changes
    /// to an eviction.
    pub fn session(&self) -> &Arc<ClientSession> {
        &self.opts.session
    }

    /// The MGS client.
    pub fn mgs(&self) -> &MgsClient {
        &self.mgs
    }

    /// Wakes its holder whenever a newer configuration has been fetched (the MGS announces
    /// changes by callback; a poll every few seconds catches missed ones).
    pub fn watch_config(&self) -> tokio::sync::watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// The configuration as last fetched.
    pub fn config(&self) -> Arc<FsConfig> {
        self.config.read().clone()
    }

    /// Fetches the configuration again and re-points clients of targets that moved.
    pub async fn refresh(&self) -> Result<Arc<FsConfig>, ClientError> {
        let fresh = self.mgs.config().await?;
        Ok(self.install(fresh))
    }

    /// [`refresh`](Self::refresh) if the MGS's configuration is not the one held (the
    /// periodic check: the MGS answers a few bytes while nothing changed).
    pub async fn refresh_if_changed(&self) -> Result<Arc<FsConfig>, ClientError> {
        let have = self.config().version;
        match self.mgs.config_if_newer(have).await? {
            Some(fresh) => Ok(self.install(fresh)),
            None => Ok(self.config()),
        }
    }

    /// Makes `fresh` the configuration unless it is older than the one held.
    fn install(&self, fresh: FsConfig) -> Arc<FsConfig> {
        let fresh = Arc::new(fresh);
        {
            let mut cur = self.config.write();
            if fresh.version < cur.version {
                return cur.clone();
            }
            *cur = fresh.clone();
        }
        self.version.send_if_modified(|v| {
            let changed = *v != fresh.version;
            *v = fresh.version;
            changed
        });
        // A target that re-registered elsewhere (or changed its failover addresses): later
        // connections go to its new address first.
        for t in &fresh.targets {
            let conn_addr = |c: &weft_rpc::Reconnecting| c.set_addresses(t.addresses());
            match t.id.kind {
                TargetKind::Mdt => {
                    if let Some(c) = self.mdts.read().get(&t.id.index) {
                        conn_addr(c.connection());
                    }
                }
                TargetKind::Ost => {
                    if let Some(c) = self.osts.read().get(&t.id.index) {
                        conn_addr(c.connection());
                    }
                }
                TargetKind::Mgs => {}
            }
        }
        fresh
    }

    fn reconnecting(&self, target: TargetId, addrs: Vec<String>) -> Reconnecting {
        let hello = ConnectRequest {
            fsname: self.fsname.clone(),
            client_uuid: self.opts.node_uuid,
            protocol_version: PROTOCOL_VERSION,
            features: FEATURES_SUPPORTED,
            target,
        };
        let first = addrs.first().cloned().unwrap_or_default();
        let conn = Reconnecting::new(
            self.transport.clone(),
            first,
            hello,
            None,
            self.opts.rpc.clone(),
        )
        .with_session(self.opts.session.clone());
        conn.set_addresses(addrs);
        conn
    }

    /// Where target `id` is served: its address, then its failover addresses.
    fn addresses_of(&self, id: TargetId) -> Result<Vec<String>, ClientError> {
        self.config()
            .target(id)
            .map(|t| t.addresses())
            .ok_or(ClientError::UnknownTarget(id))
    }

    /// The MDT and OST clients opened so far (for statistics), in index order.
    pub fn open_targets(&self) -> (Vec<Arc<MdtClient>>, Vec<Arc<OstClient>>) {
        let mut mdts: Vec<_> = self.mdts.read().values().cloned().collect();
        let mut osts: Vec<_> = self.osts.read().values().cloned().collect();
        mdts.sort_by_key(|m| m.index());
        osts.sort_by_key(|o| o.index());
        (mdts, osts)
    }

    /// What this client changed: which inodes and entries its requests to any MDT may
    /// have changed since a moment, and the attributes of the directories its changes
    /// were made in (see [`Changes::take_dir`]).
    pub fn changes(&self) -> &Changes {
        &self.changes
    }

    /// The client of MDT `index`.
    pub fn mdt(&self, index: u32) -> Result<Arc<MdtClient>, ClientError> {
        if let Some(c) = self.mdts.read().get(&index) {
            return Ok(c.clone());
        }
        let id = TargetId::mdt(index);
        let conn = self.reconnecting(id, self.addresses_of(id)?);
        let mut mdts = self.mdts.write();
        Ok(mdts
            .entry(index)
            .or_insert_with(|| Arc::new(MdtClient::new(index, conn, self.changes.clone())))
            .clone())
    }

    /// The client of OST `index`.
    pub fn ost(&self, index: u32) -> Result<Arc<OstClient>, ClientError> {
        if let Some(c) = self.osts.read().get(&index) {
            return Ok(c.clone());
        }
        let id = TargetId::ost(index);
        let conn = self.reconnecting(id, self.addresses_of(id)?);
        let mut osts = self.osts.write();
        Ok(osts
            .entry(index)
            .or_insert_with(|| Arc::new(OstClient::new(index, conn)))
            .clone())
    }

    /// The MDT that owns `fid`, from the FID location database.
    pub fn mdt_of(&self, fid: Fid) -> Result<Arc<MdtClient>, ClientError> {
        let index = self.config().mdt_of_seq(fid.seq).ok_or_else(|| {
            ClientError::Invalid(format!("FID {fid} is in no known sequence range"))
        })?;
        self.mdt(index)
    }
}

/// How often a client checks the configuration even without a callback: a client whose
/// MGS connection broke (an MGS restart) is not subscribed again until it calls the MGS.
const CONFIG_POLL: std::time::Duration = std::time::Duration::from_secs(10);

async fn refresh_on_callbacks(cluster: Weak<Cluster>, mut rx: mpsc::UnboundedReceiver<u64>) {
    loop {
        let announced = tokio::select! {
            v = rx.recv() => match v {
                Some(v) => Some(v),
                None => return,
            },
            _ = tokio::time::sleep(CONFIG_POLL) => None,
        };
        let Some(cluster) = cluster.upgrade() else {
            return;
        };
        if announced.is_some_and(|v| cluster.config().version >= v) {
            continue;
        }
        let fetched = match announced {
            Some(_) => cluster.refresh().await,
            None => cluster.refresh_if_changed().await,
        };
        if let Err(e) = fetched {
            tracing::debug!(error = %e, "could not fetch the configuration");
        }
    }
}
