//! `weft advise io`: a training data set read every epoch — the expected epoch time, the
//! metadata load it puts on the MDTs, and whether more MDTs (DNE) or a client-local cache
//! (PCC) would help.
//!
//! Readers open each file once per epoch and read it whole. The data time is the bytes
//! over the readers' aggregate read bandwidth; the metadata time is the opens over what
//! the MDTs serve; the two overlap (readers open the next file while others read), so the
//! epoch takes the longer of them.

use crate::Calibration;
use crate::Error;
use crate::model::combine;
use serde::Serialize;

/// The data set and its readers.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetJob {
    /// Files in the data set.
    pub files: u64,
    /// Bytes per file (mean).
    pub file_size: u64,
    /// Reader processes.
    pub readers: u32,
    /// Reader processes per client node.
    pub readers_per_node: u32,
    /// MDTs serving the data set's directories.
    pub mdts: u32,
    /// Bytes of local cache per client node PCC could use (0: none).
    pub cache_per_node: u64,
}

/// The advice, as printed and as `--json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DatasetAdvice {
    /// Calibration date.
    pub calibration_date: String,
    /// Bytes read per epoch.
    pub dataset_bytes: f64,
    /// Client nodes.
    pub nodes: u32,
    /// Aggregate read bandwidth, bytes/s.
    pub read_bandwidth: f64,
    /// Seconds reading data.
    pub data_time_s: f64,
    /// Seconds of metadata (opens) at the MDTs' rate.
    pub metadata_time_s: f64,
    /// Expected epoch time, seconds.
    pub epoch_s: f64,
    /// Opens per second the epoch asks of the MDTs.
    pub opens_per_s: f64,
    /// Share of the MDTs' capacity that is.
    pub mdt_load: f64,
    /// Whether more MDTs (DNE, directories striped over them) would shorten the epoch.
    pub dne_helps: bool,
    /// MDTs that make metadata no longer the limit.
    pub mdts_needed: u32,
    /// Whether a client-local read cache (PCC) would help from the second epoch on.
    pub pcc_helps: bool,
    /// Why, in words.
    pub reasons: Vec<String>,
}

impl DatasetJob {
    /// The advice for this data set on the calibrated file system.
    pub fn advise(&self, cal: &Calibration) -> Result<DatasetAdvice, Error> {
        if self.files == 0
            || self.file_size == 0
            || self.readers == 0
            || self.readers_per_node == 0
            || self.mdts == 0
        {
            return Err(Error::Input(
                "files, file size, readers, readers per node and MDTs must be positive".into(),
            ));
        }
        let per_node = self.readers_per_node.min(self.readers);
        let nodes = self.readers.div_ceil(per_node);
        let bytes = self.files as f64 * self.file_size as f64;
        let read_bandwidth = self.read_bw(cal, f64::from(nodes), f64::from(per_node));
        let data_time_s = bytes / read_bandwidth;
        // Opens: each reader one at a time (t_open each), and all of them at most at the
        // MDTs' rate (a node's many-task rate taken as what one MDT serves).
        let mdt_rate = cal.md_ops_per_s * f64::from(self.mdts);
        let per_reader = self.files as f64 / f64::from(self.readers) * cal.t_open;
        let metadata_time_s = per_reader.max(self.files as f64 / mdt_rate);
        let epoch_s = data_time_s.max(metadata_time_s);
        let opens_per_s = self.files as f64 / epoch_s;
        let mdt_load = opens_per_s / mdt_rate;
        let mut reasons = Vec::new();
        let md_bound = self.files as f64 / mdt_rate;
        let dne_helps = md_bound > data_time_s && md_bound >= per_reader;
        let mdts_needed = ((self.files as f64 / (data_time_s * cal.md_ops_per_s)).ceil() as u32)
            .max(self.mdts)
            .min(4096);
        if dne_helps {
            reasons.push(format!(
                "metadata limits the epoch ({:.1} s of opens against {:.1} s of data): \
                 striping the directories over {mdts_needed} MDTs removes that",
                md_bound, data_time_s
            ));
        }
        let share = bytes / f64::from(nodes);
        let pcc_helps = self.cache_per_node > 0 && share <= self.cache_per_node as f64;
        if pcc_helps {
            reasons.push(format!(
                "each node's share of the data set ({:.1} GB) fits its {:.1} GB local cache: \
                 epochs after the first read it locally (PCC)",
                share / 1e9,
                self.cache_per_node as f64 / 1e9
            ));
        } else if self.cache_per_node > 0 {
            reasons.push("the data set's share per node does not fit the local cache".into());
        }
        Ok(DatasetAdvice {
            calibration_date: cal.date.clone(),
            dataset_bytes: bytes,
            nodes,
            read_bandwidth,
            data_time_s,
            metadata_time_s,
            epoch_s,
            opens_per_s,
            mdt_load,
            dne_helps,
            mdts_needed,
            pcc_helps,
            reasons,
        })
    }

    /// Aggregate read bandwidth: the nodes' measured read rate, combined with the servers'
    /// side scaled as for writes (reads of all OSTs over what one node gets from them).
    fn read_bw(&self, cal: &Calibration, nodes: f64, per_node: f64) -> f64 {
        let osts = f64::from(cal.osts);
        let node_write = cal.model_bw(1.0, per_node, osts);
        let server_read = cal.read_bw * cal.server_bw(osts) / node_write.max(1.0);
        combine(
            nodes * cal.read_bw,
            server_read.max(cal.read_bw),
            cal.coupling,
        )
    }

    /// Epoch time against readers, for the plot: `(readers, seconds)`.
    pub fn epoch_curve(&self, cal: &Calibration, upto: u32) -> Vec<(f64, f64)> {
        (1..=upto.max(2))
            .filter_map(|r| {
                let job = DatasetJob {
                    readers: r,
                    ..self.clone()
                };
                job.advise(cal).ok().map(|a| (f64::from(r), a.epoch_s))
            })
            .collect()
    }
}
