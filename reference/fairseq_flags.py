"""Every option fairseq-interactive and fairseq-generate 0.12.2 accept, as their own parsers
define them (task translation, with the moses tokenizer and the subword_nmt and sentencepiece
BPEs, whose options appear once they are chosen): one line per option string,
`<name>\t<arity>\t<programs>`, arity being flag, value or optional. The tests of
src/cli/args/parse.rs hold tchseq's table (src/cli/args/fairseq_table.rs) to this list.

    python reference/fairseq_flags.py > tests/fixtures/fairseq_flags.tsv
"""
import argparse

from fairseq import options


def option_strings(parser_fn, extra):
    parser = parser_fn()
    # what fairseq-interactive/-generate do: the task's and the registries' options join once chosen
    args, _ = options.parse_args_and_arch(parser, input_args=["data", *extra], parse_known=True)
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        for s in action.option_strings:
            if not s.startswith("--"):
                continue
            if action.nargs == 0:
                arity = "flag"
            elif action.nargs == "?":
                arity = "optional"
            else:
                arity = "value"
            found[s] = arity
    return found


EXTRA = ["--task", "translation", "--tokenizer", "moses", "--bpe", "subword_nmt"]
EXTRA_SPM = ["--task", "translation", "--bpe", "sentencepiece"]


def main():
    programs = {}
    for prog, fn in (("interactive", options.get_interactive_generation_parser), ("generate", options.get_generation_parser)):
        for extra in (EXTRA, EXTRA_SPM):
            for name, arity in option_strings(fn, extra).items():
                entry = programs.setdefault(name, [arity, set()])
                entry[1].add(prog)
    for name in sorted(programs):
        arity, progs = programs[name]
        print(f"{name}\t{arity}\t{','.join(sorted(progs))}")


if __name__ == "__main__":
    main()
