use super::*;
use crate::checkpoint::pickle::parse;

fn round_trip(bytes: &[u8]) -> Vec<u8> {
    let (p, _) = parse(bytes, 0).unwrap();
    write(&p, &p.root).unwrap().bytes
}

#[test]
fn scalars_lists_and_tuples_are_written_as_cpython_writes_them() {
    // pickle.dumps({'a': 1, 'b': [0, 255, 256, 65536, -1, 2**31, -2**31-1, 2**63-1, 2**70,
    //   -2**70, 2.5, None, True, False, 'x'], 'c': (), 'd': (1,), 'e': (1,2,3,4)}, protocol=2)
    let python = b"\x80\x02\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x61\x71\x01\x4b\x01\x58\x01\x00\x00\x00\x62\x71\x02\x5d\x71\x03\x28\x4b\x00\x4b\xff\x4d\x00\x01\x4a\x00\x00\x01\x00\x4a\xff\xff\xff\xff\x8a\x05\x00\x00\x00\x80\x00\x8a\x05\xff\xff\xff\x7f\xff\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x40\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\xc0\x47\x40\x04\x00\x00\x00\x00\x00\x00\x4e\x88\x89\x58\x01\x00\x00\x00\x78\x71\x04\x65\x58\x01\x00\x00\x00\x63\x71\x05\x29\x58\x01\x00\x00\x00\x64\x71\x06\x4b\x01\x85\x71\x07\x58\x01\x00\x00\x00\x65\x71\x08\x28\x4b\x01\x4b\x02\x4b\x03\x4b\x04\x74\x71\x09\x75\x2e";
    assert_eq!(round_trip(python), python.to_vec());
}

#[test]
fn ordered_dicts_namespaces_bytes_sets_and_shared_lists_are_written_as_cpython_writes_them() {
    // o = OrderedDict(w=1); o._metadata = {'': {'version': 1}}; shared = [1]
    // pickle.dumps({'o': o, 'n': Namespace(lr=0.5), 'b': b'\x00\xff', 's': {3},
    //   'sh': [shared, shared]}, protocol=2)
    let python = b"\x80\x02\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x6f\x71\x01\x63\x63\x6f\x6c\x6c\x65\x63\x74\x69\x6f\x6e\x73\x0a\x4f\x72\x64\x65\x72\x65\x64\x44\x69\x63\x74\x0a\x71\x02\x29\x52\x71\x03\x58\x01\x00\x00\x00\x77\x71\x04\x4b\x01\x73\x7d\x71\x05\x58\x09\x00\x00\x00\x5f\x6d\x65\x74\x61\x64\x61\x74\x61\x71\x06\x7d\x71\x07\x58\x00\x00\x00\x00\x71\x08\x7d\x71\x09\x58\x07\x00\x00\x00\x76\x65\x72\x73\x69\x6f\x6e\x71\x0a\x4b\x01\x73\x73\x73\x62\x58\x01\x00\x00\x00\x6e\x71\x0b\x63\x61\x72\x67\x70\x61\x72\x73\x65\x0a\x4e\x61\x6d\x65\x73\x70\x61\x63\x65\x0a\x71\x0c\x29\x81\x71\x0d\x7d\x71\x0e\x58\x02\x00\x00\x00\x6c\x72\x71\x0f\x47\x3f\xe0\x00\x00\x00\x00\x00\x00\x73\x62\x58\x01\x00\x00\x00\x62\x71\x10\x63\x5f\x63\x6f\x64\x65\x63\x73\x0a\x65\x6e\x63\x6f\x64\x65\x0a\x71\x11\x58\x03\x00\x00\x00\x00\xc3\xbf\x71\x12\x58\x06\x00\x00\x00\x6c\x61\x74\x69\x6e\x31\x71\x13\x86\x71\x14\x52\x71\x15\x58\x01\x00\x00\x00\x73\x71\x16\x63\x5f\x5f\x62\x75\x69\x6c\x74\x69\x6e\x5f\x5f\x0a\x73\x65\x74\x0a\x71\x17\x5d\x71\x18\x4b\x03\x61\x85\x71\x19\x52\x71\x1a\x58\x02\x00\x00\x00\x73\x68\x71\x1b\x5d\x71\x1c\x28\x5d\x71\x1d\x4b\x01\x61\x68\x1d\x65\x75\x2e";
    assert_eq!(round_trip(python), python.to_vec());
}

#[test]
fn a_protocol_0_long_literal_is_written_as_long1() {
    // pickle.dumps(-2**70, protocol=0) and pickle.dumps(2**64, protocol=0)
    assert_eq!(round_trip(b"L-1180591620717411303424L\n."), b"\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\xc0.");
    assert_eq!(round_trip(b"L18446744073709551616L\n."), b"\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01.");
}

#[test]
fn constructs_the_tree_keeps_in_part_are_refused() {
    // frozenset({1}) at protocol 2
    let (p, _) = parse(b"\x80\x02c__builtin__\nfrozenset\n]K\x01a\x85R.", 0).unwrap();
    let err = write(&p, &p.root).unwrap_err().to_string();
    assert!(err.contains("frozenset"), "{err}");
    // an object made by NEWOBJ_EX with keyword arguments
    let (p, _) = parse(b"\x80\x04\x8c\x01m\x8c\x01C\x93)}\x8c\x01kK\x01s\x92.", 0).unwrap();
    assert!(write(&p, &p.root).unwrap_err().to_string().contains("keyword arguments"));
}

#[test]
fn a_tensor_is_written_as_torch_saves_it_and_storages_are_numbered_as_met() {
    // torch.save({'a': torch.zeros(2, 3), 'b': <a view of a's storage>, 'c': torch.ones(1)})
    let mut p = Pickle::default();
    let storage = |key: &str, numel| Node::Storage(super::super::StorageRef { key: key.into(), dtype: StorageDtype::Float32, location: "cuda:0".into(), numel });
    p.nodes.push(storage("x", 6));
    p.nodes.push(storage("y", 1));
    p.nodes.push(Node::Tensor(TensorRef { storage: 0, storage_offset: 0, size: vec![2, 3], stride: vec![3, 1], requires_grad: false }));
    p.nodes.push(Node::Tensor(TensorRef { storage: 0, storage_offset: 3, size: vec![3], stride: vec![1], requires_grad: false }));
    p.nodes.push(Node::Tensor(TensorRef { storage: 1, storage_offset: 0, size: vec![1], stride: vec![1], requires_grad: true }));
    let mut d = Dict::default();
    for (k, id) in [("c", 4), ("a", 2), ("b", 3)] {
        d.insert(Value::Str(Rc::from(k)), Value::Node(id));
    }
    p.nodes.push(Node::Dict(d));
    let w = write(&p, &Value::Node(5)).unwrap();
    assert_eq!(w.storages, vec![1, 0]);
    let (back, _) = parse(&w.bytes, 0).unwrap();
    let root = back.dict(&back.root).unwrap();
    let tensor = |k: &str| match back.node(root.get(k).unwrap()) {
        Some(Node::Tensor(t)) => t.clone(),
        other => panic!("{other:?}"),
    };
    let (a, b, c) = (tensor("a"), tensor("b"), tensor("c"));
    assert_eq!((a.storage, a.size.clone(), a.stride.clone()), (b.storage, vec![2, 3], vec![3, 1]));
    assert_eq!((b.storage_offset, c.requires_grad, a.requires_grad), (3, true, false));
    let Some(Node::Storage(s)) = back.nodes.get(a.storage) else { panic!() };
    assert_eq!((s.key.as_str(), s.location.as_str(), s.numel), ("1", "cpu", 6));
    assert!(back.lossy.is_none());
    // writing what was read gives the same bytes
    assert_eq!(write(&back, &back.root).unwrap().bytes, w.bytes);
}
