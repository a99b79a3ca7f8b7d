//! The administrator's verbs Python users need, without a `weft` subprocess: layouts
//! (`setstripe`, `getstripe`), usage of every target (`df`) and HSM state.

use super::Fs;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use weft_client::{ClientError, LayoutOf};
use weft_proto::layout::{EOF, LayoutTemplate};
use weft_proto::mdt::FileKind;
use weft_proto::{Errno, TargetKind, WireError};

/// A plain RAID0 layout template (`weft setstripe -c -S -i -p`).
pub fn raid0(count: i32, size: u64, offset: i32, pool: Option<String>) -> LayoutTemplate {
    let mut t = LayoutTemplate::raid0(count, size, offset);
    if let Some(c) = t.components.first_mut() {
        c.pool = pool;
    }
    t
}

/// Sets the layout of `path` to `t` (see `Fs.setstripe`).
pub fn setstripe(fs: &Fs, py: Python<'_>, path: &str, t: LayoutTemplate) -> PyResult<()> {
    let p = path.to_string();
    fs.call(py, path, |c, cred| async move {
        match c.resolve(&p, true, &cred).await {
            Ok(a) if a.kind == FileKind::Directory || a.kind == FileKind::Regular => {
                c.set_layout(a.fid, Some(t), &cred).await
            }
            Ok(_) => Err(ClientError::Remote(WireError::new(
                Errno::Inval,
                "only files and directories have layouts",
            ))),
            Err(e) if e.errno() == Errno::NoEnt => {
                let (parent, name) = c.resolve_parent(&p, &cred).await?;
                c.create_with_layout(parent.fid, &name, 0o644, t, &cred)
                    .await
                    .map(drop)
            }
            Err(e) => Err(e),
        }
    })
}

/// The layout of `path`: `{"kind": "file"|"dir", "generation", "components": [{"start",
/// "end" (None: to the end), "stripe_count", "stripe_size", "stripe_offset" (templates),
/// "pool", "osts"}]}`; a file without a layout or a directory without a default has no
/// components.
pub fn getstripe<'py>(fs: &Fs, py: Python<'py>, path: &str) -> PyResult<Bound<'py, PyAny>> {
    let p = path.to_string();
    let layout = fs.call(py, path, |c, cred| async move {
        let a = c.resolve(&p, true, &cred).await?;
        c.layout_of(a.fid).await
    })?;
    let out = PyDict::new(py);
    let comps = PyList::empty(py);
    let end = |e: u64| (e != EOF).then_some(e);
    match layout {
        LayoutOf::File(l) => {
            out.set_item("kind", "file")?;
            out.set_item("generation", l.as_ref().map(|l| l.generation))?;
            for c in l.iter().flat_map(|l| &l.components) {
                let d = PyDict::new(py);
                d.set_item("start", c.start)?;
                d.set_item("end", end(c.end))?;
                d.set_item("stripe_count", c.stripe_count)?;
                d.set_item("stripe_size", c.stripe_size)?;
                d.set_item("pool", c.pool.clone())?;
                d.set_item("osts", c.osts.clone())?;
                comps.append(d)?;
            }
        }
        LayoutOf::Dir(t) => {
            out.set_item("kind", "dir")?;
            for c in t.iter().flat_map(|t| &t.components) {
                let d = PyDict::new(py);
                d.set_item("end", end(c.end))?;
                d.set_item("stripe_count", c.stripe_count)?;
                d.set_item("stripe_size", c.stripe_size)?;
                d.set_item("stripe_offset", c.stripe_offset)?;
                d.set_item("pool", c.pool.clone())?;
                d.set_item("osts", c.ost_list.clone())?;
                comps.append(d)?;
            }
        }
    }
    out.set_item("components", comps)?;
    Ok(out.into_any())
}

/// Usage of every MDT and OST: `[{"target": "weft-OST0001_UUID", "kind": "ost",
/// "index", "online", "bsize", "blocks", "bfree", "bavail", "files", "ffree"}]`; a target
/// that does not answer is listed with `online` False and no counts.
pub fn df<'py>(fs: &Fs, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
    let rows = fs.call(py, "/", |c, _| async move {
        let cluster = c.cluster();
        let config = cluster.config();
        let fsname = cluster.fsname().to_string();
        let mut asks = Vec::new();
        for t in &config.targets {
            let id = t.id;
            let cluster = cluster.clone();
            asks.push(async move {
                let usage = match id.kind {
                    TargetKind::Mdt => match cluster.mdt(id.index) {
                        Ok(m) => m.statfs().await.ok(),
                        Err(_) => None,
                    },
                    TargetKind::Ost => match cluster.ost(id.index) {
                        Ok(o) => o.statfs().await.ok(),
                        Err(_) => None,
                    },
                    TargetKind::Mgs => return None,
                };
                Some((id, usage))
            });
        }
        let rows: Vec<_> = futures::future::join_all(asks)
            .await
            .into_iter()
            .flatten()
            .map(|(id, u)| (format!("{fsname}-{id}_UUID"), id, u))
            .collect();
        Ok::<_, ClientError>(rows)
    })?;
    let out = PyList::empty(py);
    for (name, id, usage) in rows {
        let d = PyDict::new(py);
        d.set_item("target", name)?;
        d.set_item(
            "kind",
            if id.kind == TargetKind::Mdt {
                "mdt"
            } else {
                "ost"
            },
        )?;
        d.set_item("index", id.index)?;
        d.set_item("online", usage.is_some())?;
        if let Some(s) = usage {
            d.set_item("bsize", s.bsize)?;
            d.set_item("blocks", s.blocks)?;
            d.set_item("bfree", s.bfree)?;
            d.set_item("bavail", s.bavail)?;
            d.set_item("files", s.files)?;
            d.set_item("ffree", s.ffree)?;
        }
        out.append(d)?;
    }
    Ok(out.into_any())
}

/// The names of the HSM flags set in `flags`.
pub fn hsm_words(flags: u32) -> Vec<&'static str> {
    weft_proto::hsm::flag_names(flags)
}
