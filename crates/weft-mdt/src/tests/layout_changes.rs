//! Layout changes after create: PFL instantiation and the migration swap.

use super::harness::{H, errno, root};
use weft_proto::layout::{EOF, Layout, LayoutTemplate, TemplateComponent};
use weft_proto::mdt::{AccessMode, MdtReply, MdtRequest, OpenFlags};
use weft_proto::{Errno, Fid};

fn pfl() -> LayoutTemplate {
    let comp = |end, stripe_count| TemplateComponent {
        end,
        stripe_count,
        stripe_size: 1 << 20,
        stripe_offset: -1,
        ost_list: Vec::new(),
        pool: None,
        compress: Default::default(),
    };
    LayoutTemplate {
        components: vec![comp(1 << 20, 1), comp(EOF, 2)],
    }
}

async fn layout(h: &H, fid: Fid) -> Layout {
    match h.run(MdtRequest::GetLayout { fid }).await.unwrap() {
        MdtReply::Layout(Some(l)) => l,
        other => panic!("getlayout replied {other:?}"),
    }
}

async fn open(h: &H, conn: u64, fid: Fid, access: AccessMode) -> u64 {
    let req = MdtRequest::Open {
        fid,
        flags: OpenFlags {
            access,
            truncate: false,
        },
        cred: root(),
    };
    match h.run_on(conn, req).await.unwrap() {
        MdtReply::Opened { handle, .. } => handle,
        other => panic!("open replied {other:?}"),
    }
}

async fn close(h: &H, conn: u64, handle: u64, size: Option<u64>) {
    let req = MdtRequest::Close {
        handle,
        size,
        blocks: None,
        modified: size.is_some(),
    };
    h.run_on(conn, req).await.unwrap();
}

#[tokio::test]
async fn components_are_instantiated_on_request_once() {
    let h = H::new().await;
    let (f, handle) = h.create_open(1, Fid::ROOT, "p", Some(pfl())).await;
    let l0 = layout(&h, f).await;
    assert!(l0.components[0].is_instantiated() && !l0.components[1].is_instantiated());

    let inst =
        |conn, handle, start, end| h.run_on(conn, MdtRequest::Instantiate { handle, start, end });
    // Within the first component: nothing to do, same layout.
    assert_eq!(
        inst(1, handle, 0, 100).await.unwrap(),
        MdtReply::Layout(Some(l0.clone()))
    );
    let MdtReply::Layout(Some(l1)) = inst(1, handle, 2 << 20, 3 << 20).await.unwrap() else {
        panic!()
    };
    assert_eq!(l1.components[1].osts.len(), 2);
    assert_eq!(l1.generation, l0.generation + 1);
    assert_eq!(l1.components[0], l0.components[0]);
    // Again (a resend, or another writer): unchanged.
    assert_eq!(
        inst(1, handle, 5 << 20, 6 << 20).await.unwrap(),
        MdtReply::Layout(Some(l1.clone()))
    );
    assert_eq!(layout(&h, f).await, l1);
    // Only a writer's own handle may ask.
    assert_eq!(errno(inst(2, handle, 0, 1).await), Errno::BadF);
    let reader = open(&h, 1, f, AccessMode::Read).await;
    assert_eq!(errno(inst(1, reader, 0, 1).await), Errno::BadF);
    assert_eq!(errno(inst(1, handle, 5, 5).await), Errno::Inval);
}

#[tokio::test]
async fn a_swap_moves_layouts_and_old_readers_pin_the_old_objects() {
    let h = H::new().await;
    let (f, w) = h.create_open(1, Fid::ROOT, "f", None).await;
    close(&h, 1, w, Some(100)).await;
    let old = layout(&h, f).await;
    let dv = h.getattr(f).await.unwrap().data_version;
    let reader = open(&h, 2, f, AccessMode::Read).await;

    // The volatile copy: created, unlinked, written to the same size.
    let t = LayoutTemplate::raid0(2, 0, -1);
    let (v, vh) = h.create_open(3, Fid::ROOT, ".v", Some(t)).await;
    h.run_on(
        3,
        MdtRequest::Unlink {
            parent: Fid::ROOT,
            name: ".v".into(),
            cred: root(),
        },
    )
    .await
    .unwrap();
    h.run_on(
        3,
        MdtRequest::SizeMerge {
            handle: vh,
            size: Some(100),
            blocks: None,
            modified: true,
        },
    )
    .await
    .unwrap();
    let new = layout(&h, v).await;
    let swap = |data_version| MdtRequest::SwapLayouts {
        fid: f,
        volatile: v,
        handle: vh,
        data_version,
        cred: root(),
    };
    // The data version moved: refused.
    assert_eq!(errno(h.run_on(3, swap(dv + 1)).await), Errno::Busy);
    // Someone has the file open for writing: refused.
    let writer = open(&h, 4, f, AccessMode::Write).await;
    assert_eq!(errno(h.run_on(3, swap(dv)).await), Errno::Busy);
    close(&h, 4, writer, None).await;
    // Not the volatile's own handle: refused.
    assert_eq!(errno(h.run_on(2, swap(dv)).await), Errno::BadF);

    let MdtReply::Layout(Some(swapped)) = h.run_on(3, swap(dv)).await.unwrap() else {
        panic!()
    };
    assert!(swapped.generation > old.generation);
    assert_eq!(layout(&h, f).await, swapped);
    // Objects keep the FID they were created under.
    let objects = |l: &Layout, fid| l.objects(fid).collect::<Vec<_>>();
    assert_eq!(objects(&swapped, f), objects(&new, v));
    assert_eq!(objects(&layout(&h, v).await, v), objects(&old, f));
    let a = h.getattr(f).await.unwrap();
    assert_eq!((a.size, a.data_version), (100, dv));

    // The migration tool closes its handle: the reader still pins the old layout.
    close(&h, 3, vh, None).await;
    assert!(h.getattr(v).await.is_ok());
    close(&h, 2, reader, None).await;
    assert_eq!(errno(h.getattr(v).await), Errno::Stale);
    assert_eq!(layout(&h, f).await, swapped);
}

/// With every OST inactive (none heard from lately: restarting, or cut off from the MGS),
/// a create is answered EINPROGRESS, which clients send again, not ENOSPC; it succeeds,
/// with nothing left behind by the refused attempt, once an OST is active again.
#[tokio::test]
async fn creates_wait_for_an_active_ost_instead_of_failing() {
    let h = H::new().await;
    let osts: Vec<u32> = (0..4).collect();
    for &o in &osts {
        h.cluster.set_active(o, false);
    }
    assert_eq!(
        errno(h.create_as(Fid::ROOT, "f", 0o100644, &root()).await),
        Errno::InProgress
    );
    h.cluster.set_active(2, true);
    let f = h.create(Fid::ROOT, "f").await;
    assert_eq!(layout(&h, f).await.components[0].osts, vec![2]);
}
