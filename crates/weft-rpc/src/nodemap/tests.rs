//! Unit tests of client classes: address blocks, parameters, the checks.

use super::*;

#[test]
fn blocks_hold_their_addresses() {
    let b = Cidr::parse("10.1.0.0/16").unwrap();
    assert!(b.contains("10.1.200.3".parse().unwrap()));
    assert!(!b.contains("10.2.0.1".parse().unwrap()));
    assert!(b.contains("::ffff:10.1.0.9".parse().unwrap()));
    let odd = Cidr::parse("192.168.1.128/25").unwrap();
    assert!(odd.contains("192.168.1.200".parse().unwrap()));
    assert!(!odd.contains("192.168.1.100".parse().unwrap()));
    assert!(
        Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap())
    );
    let one = Cidr::parse("127.0.0.7").unwrap();
    assert!(one.contains("127.0.0.7".parse().unwrap()));
    assert!(!one.contains("127.0.0.8".parse().unwrap()));
    assert!(
        Cidr::parse("fd00::/8")
            .unwrap()
            .contains("fd12::1".parse().unwrap())
    );
    for bad in ["10.0.0.0/33", "nope/8", "10.0.0.0/x", "", "::/129"] {
        assert!(Cidr::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn classes_come_from_parameters() {
    let params = [
        ("nodemap.lab.range", "10.0.0.0/8, 192.168.0.0/16"),
        ("nodemap.lab.squash_root", "1"),
        ("nodemap.lab.read_only", "0"),
        ("nodemap.admins.range", "10.9.9.0/24"),
        ("nodemap.admins.admin", "1"),
        ("nodemap.bad.read_only", "maybe"),
        ("nodemap.bad.colour", "1"),
        ("nodemap.nodot", "1"),
        ("osc.*.max_dirty_mb", "64"),
    ];
    let (map, errors) = NodeMap::from_params(params.iter().copied());
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert_eq!(map.classes().len(), 3);
    // First by name: "admins" before "lab".
    let c = map.class_of("10.9.9.1".parse().unwrap()).unwrap();
    assert_eq!(
        (c.name.as_str(), c.admin, c.squash_root),
        ("admins", true, false)
    );
    let c = map.class_of("192.168.3.4".parse().unwrap()).unwrap();
    assert_eq!(
        (c.name.as_str(), c.squash_root, c.read_only),
        ("lab", true, false)
    );
    assert!(map.class_of("172.16.0.1".parse().unwrap()).is_none());
}
