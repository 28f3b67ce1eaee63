#!/usr/bin/env python3
"""Writes graphcheck's corpus of hostile inputs and its manifest, EXPECTED.tsv.

Every entry is a malformed checkpoint (*.safetensors, run as `graphcheck inspect FILE`) or scenario
file (*.yaml, run as `graphcheck run FILE --report-dir DIR`) that must give exit code 2 and a
message naming the file and the problem, with no crash, no hang and no allocation in proportion to
a number read from the file. tests/hostile.cmake runs one ctest per manifest row.

    python3 make_corpus.py                  # rewrite the files kept in git and EXPECTED.tsv here
    python3 make_corpus.py --out DIR        # the same, into DIR
    python3 make_corpus.py --generated DIR  # write the entries too large for git into DIR

The manifest's fourth column says where an entry comes from: `tree` (a file in this folder, at
most 64 KiB), `generated` (written at test time by --generated: 100k-deep nesting is 200 KB),
or `special:KIND` (made by the test itself, since git cannot hold it: `fifo` a named pipe,
`directory` an empty directory, `fifo-in-directory` a directory holding the FIFO `inner.yaml`,
`device` the character device /dev/zero).

Standard library only, and deterministic: the "random" bytes come from a fixed LCG.
"""

import argparse
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_TREE_BYTES = 64 * 1024


def le64(n):
    return struct.pack("<Q", n)


def image(header, data=b""):
    """A safetensors file: the 8-byte header size, the header, the data section."""
    if isinstance(header, str):
        header = header.encode("utf-8")
    return le64(len(header)) + header + data


def header(entries):
    return json.dumps(entries, separators=(",", ":"))


def u8(n, begin=0, end=None):
    return {"dtype": "U8", "shape": [n], "data_offsets": [begin, begin + n if end is None else end]}


def lcg_bytes(n, seed):
    out = bytearray()
    x = seed
    for _ in range(n):
        x = (x * 1103515245 + 12345) % (1 << 31)
        out.append((x >> 16) & 0xFF)
    return bytes(out)


MINIMAL = "model: {fixture: dsv4}\ncapture: {batch_sizes: [1]}\n"


def scenario(head, tail=MINIMAL):
    return (head + tail).encode("utf-8") if isinstance(head, str) else head + tail.encode("utf-8")


def alias_bomb(levels=10, fanout=10):
    lines = ["scenario: bomb", "a0: &a0 [" + ", ".join(["lol"] * fanout) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * fanout) + "]")
    return ("\n".join(lines) + "\n").encode()


def deep_flow(depth):
    return scenario("scenario: deep\ndescription: " + "[" * depth + "]" * depth + "\n")


def deep_maps(depth):
    return scenario("scenario: deep\ndescription: " + "{a: " * depth + "1" + "}" * depth + "\n")


# (file name, bytes or None for special entries, substring of the expected message, origin)
def tree_entries():
    e = []

    def add(name, data, expect):
        e.append((name, data, expect, "tree"))

    # ---- safetensors: size prefix and header size
    add("st_empty.safetensors", b"", "file is 0 bytes, shorter than the 8-byte header-size prefix")
    add("st_short.safetensors", b"\x02\x00\x00\x00\x00", "file is 5 bytes, shorter than the 8-byte")
    add("st_binary_garbage.safetensors", lcg_bytes(4096, 1), "is absurdly large")
    add("st_header_past_end.safetensors", le64(1000) + b"{}", "runs past the end of the file")
    add("st_header_one_past_end.safetensors", le64(3) + b"{}", "runs past the end of the file")
    add("st_header_size_2_64_minus_1.safetensors", le64(2**64 - 1) + b"{}", "is absurdly large")
    add("st_header_size_2_63.safetensors", le64(2**63) + b"{}", "is absurdly large")
    add("st_header_size_2_64_minus_8.safetensors", le64(2**64 - 8) + b"{}" + b" " * 6,
        "is absurdly large")
    # ---- safetensors: the header text
    add("st_header_binary_garbage.safetensors", le64(256) + lcg_bytes(256, 7).replace(b"\x00", b"\x01"),
        "header is not valid JSON")
    add("st_header_not_json.safetensors", image("{not json"), "header is not valid JSON")
    add("st_header_empty.safetensors", image(""), "header is not valid JSON")
    add("st_header_nul_padding.safetensors", image(b"{}\x00\x00\x00\x00\x00\x00"),
        "NUL byte at header offset 2")
    add("st_header_bad_utf8.safetensors", image(b'{"\xff":1}'), "header is not valid JSON")
    add("st_header_array.safetensors", image("[1,2]"), "header is not a JSON object but an array")
    add("st_header_string.safetensors", image('"x"'), "header is not a JSON object but a string")
    add("st_header_number_overflow.safetensors",
        image('{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1e400]}}', b"x"),
        "header is not valid JSON")
    add("st_header_nested_200.safetensors", image("[" * 200 + "]" * 200),
        "nests objects/arrays deeper than 128 levels")
    add("st_header_nested_objects.safetensors",
        image('{"w":' + '{"a":' * 5000 + "1" + "}" * 5001), "deeper than 128 levels")
    add("st_duplicate_tensor.safetensors",
        image('{"w":' + header(u8(4)) + ',"w":' + header(u8(4)) + "}", b"abcd"),
        "tensor 'w' is declared twice in the header (duplicate name)")
    add("st_duplicate_entry_key.safetensors",
        image('{"w":{"dtype":"U8","dtype":"I8","shape":[4],"data_offsets":[0,4]}}', b"abcd"),
        "key 'dtype' appears twice in one object of the header (duplicate key)")
    # ---- safetensors: entries of the wrong JSON type
    add("st_entry_not_object.safetensors", image('{"w":5}'), "tensor 'w': header entry is not an object")
    add("st_entry_missing_offsets.safetensors", image('{"w":{"dtype":"U8","shape":[4]}}', b"abcd"),
        "is missing key 'data_offsets'")
    add("st_entry_extra_key.safetensors",
        image('{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4],"offsets":[0,4]}}', b"abcd"),
        "unexpected key 'offsets' in header entry")
    add("st_dtype_not_string.safetensors",
        image('{"w":{"dtype":5,"shape":[4],"data_offsets":[0,4]}}', b"abcd"), '"dtype" must be a string')
    add("st_unknown_dtype.safetensors",
        image('{"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}}', b"abcd"), "unknown dtype 'F33'")
    add("st_shape_not_list.safetensors",
        image('{"w":{"dtype":"U8","shape":"4","data_offsets":[0,4]}}', b"abcd"),
        '"shape" must be an array of non-negative integers')
    add("st_shape_float.safetensors",
        image('{"w":{"dtype":"U8","shape":[4.0],"data_offsets":[0,4]}}', b"abcd"),
        '"shape" must be an array of non-negative integers')
    add("st_shape_negative.safetensors",
        image('{"w":{"dtype":"U8","shape":[-1,4],"data_offsets":[0,4]}}', b"abcd"), "has a negative dim -1")
    add("st_offsets_not_integers.safetensors",
        image('{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,"4"]}}', b"abcd"),
        '"data_offsets" must be an array of two non-negative integers')
    add("st_offsets_object.safetensors",
        image('{"w":{"dtype":"U8","shape":[4],"data_offsets":{"begin":0,"end":4}}}', b"abcd"),
        '"data_offsets" must be an array of two non-negative integers')
    add("st_offsets_three.safetensors",
        image('{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4,4]}}', b"abcd"),
        '"data_offsets" must be an array of two non-negative integers')
    add("st_offsets_negative.safetensors",
        image('{"w":{"dtype":"U8","shape":[4],"data_offsets":[-1,4]}}', b"abcd"), "holds a negative offset")
    add("st_metadata_not_string.safetensors", image('{"__metadata__":{"a":1}}'),
        "entry 'a' has a non-string metadata value")
    add("st_metadata_nested.safetensors", image('{"__metadata__":{"a":{"b":"c"}}}'),
        "non-string metadata value")
    add("st_metadata_not_object.safetensors", image('{"__metadata__":["a"]}'),
        '"__metadata__" must be an object of string -> string')
    # ---- safetensors: shapes and offsets
    add("st_shape_product_overflow_int64.safetensors",
        image('{"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}}'),
        "too large for 64-bit arithmetic (shape product overflow)")
    add("st_shape_bytes_overflow.safetensors",
        image('{"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}}'),
        "too large for 64-bit arithmetic (shape product overflow)")
    add("st_dim_above_int64.safetensors",
        image('{"w":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,0]}}'),
        "has a dim too large for int64")
    add("st_shape_size_mismatch.safetensors",
        image('{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', b"x" * 8),
        "shape/byte-size mismatch")
    add("st_offsets_reversed.safetensors",
        image('{"w":{"dtype":"U8","shape":[4],"data_offsets":[8,4]}}', b"x" * 8),
        "are reversed (begin > end)")
    add("st_offsets_out_of_range.safetensors",
        image('{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}', b"x" * 8),
        "are out of range: the data section holds only 8 bytes")
    add("st_offsets_near_2_64.safetensors",
        image('{"w":{"dtype":"U8","shape":[0],"data_offsets":[18446744073709551615,18446744073709551615]}}'),
        "are out of range")
    add("st_offsets_wrap_2_64.safetensors",
        image('{"w":{"dtype":"U8","shape":[4],"data_offsets":[18446744073709551614,2]}}', b"x" * 4),
        "are reversed (begin > end)")
    add("st_overlapping.safetensors",
        image('{"a":' + header(u8(8)) + ',"b":' + header(u8(8, 4)) + "}", b"x" * 12),
        "tensor 'b' (bytes ")
    add("st_overlapping_zero_size.safetensors",
        image('{"a":' + header(u8(8)) + ',"b":{"dtype":"U8","shape":[0],"data_offsets":[4,4]}}', b"x" * 8),
        "overlaps tensor 'a'")
    add("st_hole.safetensors",
        image('{"a":' + header(u8(4)) + ',"b":' + header(u8(4, 8)) + "}", b"x" * 12),
        "hole of 4 bytes in the data section before tensor 'b'")
    add("st_trailing_bytes.safetensors", image('{"w":' + header(u8(4)) + "}", b"abcdefgh"),
        "4 trailing bytes after the last tensor")
    add("st_truncated_data.safetensors",
        image('{"a":' + header(u8(4096)) + "}", b"x" * 100),
        "out of range: the data section holds only 100 bytes")

    # ---- scenario files
    add("sc_empty.yaml", b"", ":1:1: the file holds no YAML document")
    add("sc_only_comments.yaml", b"# nothing here\n", ":1:1: the file holds no YAML document")
    add("sc_binary_garbage.yaml", lcg_bytes(2048, 3), "invalid YAML: unknown escape character")
    add("sc_not_a_mapping.yaml", b"- scenario: list\n- model: {fixture: dsv4}\n",
        ":1:1: a scenario file must be a mapping of keys")
    add("sc_invalid_yaml.yaml", scenario("scenario: broken\nmodel:\n  fixture: dsv4\n config: {}\n", ""),
        ":4:2: invalid YAML: end of map not found")
    add("sc_unterminated_flow.yaml", b"scenario: x\nmodel: {fixture: dsv4\n", "invalid YAML")
    add("sc_deep_flow_65.yaml", deep_flow(65), "YAML nested deeper than 64 levels at 'description")
    add("sc_deep_maps_100.yaml", deep_maps(100), "YAML nested deeper than 64 levels")
    add("sc_deep_flow_2001.yaml", deep_flow(2001), "YAML nested deeper than 64 levels")
    add("sc_deep_block_sequences.yaml", scenario("scenario: deep\ndescription:\n  " + "- " * 3000 + "x\n"),
        "YAML nested deeper than 64 levels")
    add("sc_alias_bomb.yaml", alias_bomb(), "expands to more than 100000 YAML nodes")
    add("sc_alias_bomb_maps.yaml",
        ("scenario: bomb\nm0: &m0 {a: lol, b: lol, c: lol, d: lol, e: lol, f: lol, g: lol, h: lol}\n" +
         "".join(f"m{i}: &m{i} {{a: *m{i-1}, b: *m{i-1}, c: *m{i-1}, d: *m{i-1}, e: *m{i-1}, "
                 f"f: *m{i-1}, g: *m{i-1}, h: *m{i-1}}}\n" for i in range(1, 12))).encode(),
        "expands to more than 100000 YAML nodes")
    add("sc_alias_cycle.yaml", scenario("scenario: cycle\ndescription: &a [*a]\n"),
        "nested deeper than 64 levels")
    add("sc_undefined_alias.yaml", scenario("scenario: *nowhere\n"), "invalid YAML")
    add("sc_duplicate_key.yaml",
        b"scenario: dup\nmodel: {fixture: dsv4}\ncapture: {batch_sizes: [1]}\ncapture: {batch_sizes: [2]}\n",
        ":4:1: key 'capture' appears twice in scenario file (first at")
    add("sc_duplicate_nested_key.yaml",
        b"scenario: dup\nmodel: {fixture: dsv4, fixture: llama}\ncapture: {batch_sizes: [1]}\n",
        "key 'fixture' appears twice in model (first at")
    add("sc_tab_indentation.yaml", b"scenario: tabs\nmodel:\n\tfixture: dsv4\ncapture: {batch_sizes: [1]}\n",
        ":3:1: tab character in the indentation")
    add("sc_invalid_utf8_value.yaml", scenario(b"scenario: u\ndescription: caf\xe9\n"),
        ":2:14: the value of 'description' is not valid UTF-8")
    add("sc_invalid_utf8_key.yaml",
        b"scenario: u\nmodel: {fixture: dsv4, config: {lay\xffers: 1}}\ncapture: {batch_sizes: [1]}\n",
        "a key in 'model.config' is not valid UTF-8")
    add("sc_invalid_utf8_name.yaml", scenario(b"scenario: \xc0\xae\xc0\xae\n"),
        ":1:11: the value of 'scenario' is not valid UTF-8")
    add("sc_utf8_surrogate.yaml", scenario(b"scenario: s\ndescription: \xed\xa0\x80\n"),
        "is not valid UTF-8 (byte 0xed")
    add("sc_name_dotdot.yaml", scenario("scenario: ..\n"), ":1:11: scenario name '..' names a directory")
    add("sc_name_dot.yaml", scenario("scenario: '.'\n"), "scenario name '.' names a directory")
    add("sc_name_empty.yaml", scenario("scenario: ''\n"), "scenario name '' is empty")
    add("sc_name_parent_path.yaml", scenario("scenario: ../../etc\n"), "holds a slash")
    add("sc_name_absolute.yaml", scenario("scenario: /tmp/x\n"), "holds a slash")
    add("sc_name_backslash.yaml", scenario("scenario: 'a\\b'\n"), "holds a backslash")
    add("sc_name_nul.yaml", scenario('scenario: "a\\0b"\n'), "holds the control character 0x00")
    add("sc_name_control.yaml", scenario('scenario: "a\\x01b"\n'), "holds the control character 0x01")
    add("sc_name_newline.yaml", scenario('scenario: "a\\nb"\n'), "holds the control character 0x0a")
    add("sc_name_too_long.yaml", scenario("scenario: " + "n" * 300 + "\n"), "is 300 bytes long")
    add("sc_wrong_type_name_list.yaml", scenario("scenario: [a, b]\n"), ":1:11: 'scenario' must be a string")
    add("sc_wrong_type_model_list.yaml", b"scenario: t\nmodel: [dsv4]\ncapture: {batch_sizes: [1]}\n",
        ":2:8: 'model' must be a mapping")
    add("sc_wrong_type_capture_scalar.yaml", b"scenario: t\nmodel: {fixture: dsv4}\ncapture: 4\n",
        ":3:10: 'capture' must be a mapping")
    add("sc_wrong_type_batch_sizes_map.yaml",
        b"scenario: t\nmodel: {fixture: dsv4}\ncapture: {batch_sizes: {a: 1}}\n",
        "'capture.batch_sizes' must be a non-empty list of positive integers")
    add("sc_wrong_type_cycles_map.yaml", scenario("scenario: t\ncycles: {refit: {seed: 1}}\n"),
        "'cycles' must be a list")
    add("sc_wrong_type_refit_list.yaml", scenario("scenario: t\ncycles: [{refit: [1]}]\n"),
        "'refit' must be a mapping")
    add("sc_wrong_type_config_list.yaml",
        b"scenario: t\nmodel: {fixture: dsv4, config: [1, 2]}\ncapture: {batch_sizes: [1]}\n",
        "'model.config' must be a mapping")
    add("sc_wrong_type_config_value_map.yaml",
        b"scenario: t\nmodel: {fixture: dsv4, config: {layers: {a: 1}}}\ncapture: {batch_sizes: [1]}\n",
        "config key 'layers' must be a scalar")
    add("sc_wrong_type_seed_map.yaml", scenario("scenario: t\nseed: {a: 1}\n"),
        "seed must be a non-negative integer, got 'a non-scalar'")
    add("sc_wrong_type_seed_huge.yaml", scenario("scenario: t\nseed: 99999999999999999999999\n"),
        "seed must be a non-negative integer")
    add("sc_wrong_type_checks_map.yaml", scenario("scenario: t\nchecks: {address: 1}\n"),
        "'checks' must be 'all' or a list of probe names")
    add("sc_wrong_type_mutations_list.yaml", scenario("scenario: t\nmutations: [a]\n"),
        "'mutations' must map each mutation to the probes that must catch it")
    add("sc_wrong_type_poison_list.yaml",
        scenario("scenario: t\ncycles: [{refit: {seed: 2}}]\npoison: [x]\n"),
        "'poison' must be a mapping")
    add("sc_complex_key.yaml", b"scenario: t\nmodel: {fixture: dsv4, config: {[x]: 1}}\ncapture: {batch_sizes: [1]}\n",
        "keys in model.config must be strings")
    add("sc_long_unknown_key.yaml", scenario("scenario: t\n" + "k" * 1000 + ": 1\n"),
        "unknown key 'kkkk")
    add("sc_key_over_1024_chars.yaml", scenario("scenario: t\n" + "k" * 60000 + ": 1\n"),
        ":2:60001: invalid YAML: illegal map value")
    return e


def generated_entries():
    return [
        ("sc_deep_flow_100k.yaml", deep_flow(100_000), "YAML nested deeper than 64 levels", "generated"),
        ("sc_deep_maps_100k.yaml", deep_maps(100_000), "YAML nested deeper than 64 levels", "generated"),
        ("sc_oversized.yaml", scenario("scenario: big\ndescription: '" + "x" * (1 << 20) + "'\n"),
         "over the 1048576-byte limit on scenario files", "generated"),
        ("st_many_tensors.safetensors",
         image("{" + ",".join(f'"t{i}":{{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}'
                              for i in range(200_000)) + "}", b"x"),
         "1 trailing bytes after the last tensor", "generated"),
    ]


def special_entries():
    return [
        ("special_fifo.safetensors", None, "is a FIFO (named pipe), not a regular file", "special:fifo"),
        ("special_directory.safetensors", None, "is a directory, not a regular file", "special:directory"),
        ("special_dev_zero.safetensors", None, "is a character device, not a regular file", "special:device"),
        ("special_fifo.yaml", None, "is a FIFO (named pipe), not a scenario file", "special:fifo"),
        ("special_fifo_dir", None, "inner.yaml: is a FIFO (named pipe), not a scenario file",
         "special:fifo-in-directory"),
        ("special_empty_dir", None, "no scenario files (*.yaml) under", "special:directory"),
    ]


def write(directory, entries):
    os.makedirs(directory, exist_ok=True)
    for name, data, _, origin in entries:
        if data is None:
            continue
        if origin == "tree" and len(data) > MAX_TREE_BYTES:
            sys.exit(f"{name} is {len(data)} bytes, over the {MAX_TREE_BYTES}-byte limit for files in git")
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=HERE, help="where to write the corpus and EXPECTED.tsv")
    parser.add_argument("--generated", metavar="DIR", help="write only the generated entries, into DIR")
    args = parser.parse_args()
    if args.generated:
        write(args.generated, generated_entries())
        return
    entries = tree_entries() + generated_entries() + special_entries()
    names = [e[0] for e in entries]
    assert len(names) == len(set(names)), "duplicate corpus names"
    write(args.out, tree_entries())
    with open(os.path.join(args.out, "EXPECTED.tsv"), "w", encoding="utf-8") as f:
        f.write("# Written by make_corpus.py: edit that, not this.\n")
        f.write("# file\texit_code\tmessage_substring\torigin\n")
        for name, _, expect, origin in entries:
            # CMake lists split on ';' and do not split inside unbalanced '[' of a row.
            assert not set("\t\n;[]") & set(expect), f"{name}: tab, newline, ; or [] in the message"
            f.write(f"{name}\t2\t{expect}\t{origin}\n")


if __name__ == "__main__":
    main()
