//! OST pools: made, filled, emptied and destroyed (`weft pool new|add|remove|destroy`).

use super::{MAX_POOLS, Mgs, err};
use crate::names::check_pool_name;
use weft_proto::mgs::MgsReply;
use weft_proto::{Errno, TargetId, WireError, WireResult};

impl Mgs {
    pub(super) async fn pool_new(&self, pool: String) -> WireResult<MgsReply> {
        check_pool_name(&pool)?;
        self.mutate(|rec| {
            let pools = &mut rec.config.pools;
            if pools.contains_key(&pool) {
                return Err(err(Errno::Exist, format!("pool {pool} already exists")));
            }
            if pools.len() >= MAX_POOLS {
                return Err(err(
                    Errno::NoSpc,
                    format!("too many pools (at most {MAX_POOLS})"),
                ));
            }
            pools.insert(pool, Vec::new());
            Ok((true, ()))
        })
        .await?;
        Ok(MgsReply::Ok)
    }

    pub(super) async fn pool_add(&self, pool: String, osts: Vec<u32>) -> WireResult<MgsReply> {
        check_pool_name(&pool)?;
        self.mutate(|rec| {
            let config = &mut rec.config;
            if let Some(missing) = osts
                .iter()
                .find(|i| config.target(TargetId::ost(**i)).is_none())
            {
                return Err(err(
                    Errno::NoEnt,
                    format!("{} is not registered", TargetId::ost(*missing)),
                ));
            }
            let members = config.pools.get_mut(&pool).ok_or_else(|| no_pool(&pool))?;
            let before = members.len();
            members.extend_from_slice(&osts);
            members.sort_unstable();
            members.dedup();
            Ok((members.len() != before, ()))
        })
        .await?;
        Ok(MgsReply::Ok)
    }

    pub(super) async fn pool_remove(&self, pool: String, osts: Vec<u32>) -> WireResult<MgsReply> {
        check_pool_name(&pool)?;
        self.mutate(|rec| {
            let members = rec
                .config
                .pools
                .get_mut(&pool)
                .ok_or_else(|| no_pool(&pool))?;
            if let Some(missing) = osts.iter().find(|i| !members.contains(i)) {
                return Err(err(
                    Errno::NoEnt,
                    format!("{} is not in pool {pool}", TargetId::ost(*missing)),
                ));
            }
            let before = members.len();
            members.retain(|i| !osts.contains(i));
            Ok((members.len() != before, ()))
        })
        .await?;
        Ok(MgsReply::Ok)
    }

    pub(super) async fn pool_destroy(&self, pool: String) -> WireResult<MgsReply> {
        check_pool_name(&pool)?;
        self.mutate(|rec| {
            let members = rec.config.pools.get(&pool).ok_or_else(|| no_pool(&pool))?;
            if !members.is_empty() {
                return Err(err(
                    Errno::NotEmpty,
                    format!(
                        "pool {pool} still has {} OSTs; remove them first",
                        members.len()
                    ),
                ));
            }
            rec.config.pools.remove(&pool);
            Ok((true, ()))
        })
        .await?;
        Ok(MgsReply::Ok)
    }
}

fn no_pool(pool: &str) -> WireError {
    err(Errno::NoEnt, format!("pool {pool} does not exist"))
}
