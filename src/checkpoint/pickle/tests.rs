use super::*;

fn p(bytes: &[u8]) -> Pickle {
    parse(bytes, 0).unwrap().0
}

#[test]
fn memo_aliases_a_dict_filled_after_memoisation() {
    // d = {} memoised, appended to a list, and only then filled through BINGET + SETITEM;
    // the list must see the filled dict.
    let bytes = b"\x80\x02}q\x00]q\x01h\x00ah\x00X\x01\x00\x00\x00aK\x01s\x86.";
    let pk = p(bytes);
    let Some(Node::Tuple(items)) = pk.node(&pk.root) else { panic!("not a tuple") };
    let Some(Node::List(l)) = pk.node(&items[0]) else { panic!("not a list") };
    assert_eq!(l[0], items[1]);
    assert_eq!(pk.dict(&items[1]).unwrap().get("a"), Some(&Value::Int(1)));
}

#[test]
fn long1_decodes_the_legacy_magic_number() {
    // pickle.dumps(0x1950a86a20f9469cfc6c, protocol=2)
    let bytes = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19.";
    let pk = p(bytes);
    assert_eq!(pk.root, Value::BigInt(Rc::from(&b"l\xfc\x9cF\xf9 j\xa8P\x19"[..])));
    assert_eq!(p(b"\x80\x02\x8a\x02\xff\xfe.").root, Value::Int(-257));
}

#[test]
fn unknown_globals_are_described_not_called() {
    // os.system('x') via REDUCE
    let pk = p(b"cos\nsystem\nX\x01\x00\x00\x00x\x85R.");
    let Some(Node::Object { class, args, .. }) = pk.node(&pk.root) else { panic!() };
    assert_eq!(class, "os.system");
    assert_eq!(args[0], Value::Str(Rc::from("x")));
}

#[test]
fn protocol_0_text_opcodes() {
    // pickle.dumps({'a': [1, 2.5, u'\xe9', 'b']}, protocol=0)
    let pk = p(b"(dp0\nVa\np1\n(lp2\nI1\naF2.5\naV\\u00e9\np3\naVb\np4\nas.");
    let d = pk.dict(&pk.root).unwrap();
    let Some(Node::List(l)) = pk.node(d.get("a").unwrap()) else { panic!() };
    assert_eq!(l[0], Value::Int(1));
    assert_eq!(l[1], Value::Float(2.5));
    assert_eq!(l[2], Value::Str(Rc::from("\u{e9}")));
}

#[test]
fn malformed_inputs_are_errors_with_offsets() {
    assert!(matches!(parse(b"\x80\x02]", 0), Err(PickleError::Truncated { .. })));
    assert!(matches!(parse(b"\x80\x02\xff", 10), Err(PickleError::UnknownOpcode { opcode: 0xff, offset: 12 })));
    assert!(parse(b"h\x05.", 0).is_err());
    assert!(parse(b"a.", 0).is_err());
    assert!(parse(b"X\xff\xff\xff\xff", 0).is_err());
    assert!(parse(b"(0.", 0).is_err());
}
