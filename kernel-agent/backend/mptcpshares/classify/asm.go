package classify

import (
	"fmt"

	"golang.org/x/net/bpf"
)

// asm collects a classic program with symbolic forward jumps: a
// conditional jump reaches at most 255 instructions ahead (its offsets
// are 8-bit), an unconditional one anywhere ahead. Label "" is the next
// instruction.
type asm struct {
	base   uint32 // where the network header is for loads
	ins    []item
	labels map[string]int
}

// item is one instruction; a jump's targets are labels resolved by
// assemble.
type item struct {
	op      bpf.Instruction
	cond    bpf.JumpTest
	val     uint32
	jt, jf  string
	isCond  bool
	isJump  bool
	jumpsTo string
}

func (a *asm) op(i bpf.Instruction) { a.ins = append(a.ins, item{op: i}) }

func (a *asm) label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	a.labels[name] = len(a.ins)
}

func (a *asm) ja(target string) { a.ins = append(a.ins, item{isJump: true, jumpsTo: target}) }

func (a *asm) jif(c bpf.JumpTest, val uint32, jt, jf string) {
	a.ins = append(a.ins, item{isCond: true, cond: c, val: val, jt: jt, jf: jf})
}

func (a *asm) jeq(val uint32, jt, jf string)  { a.jif(bpf.JumpEqual, val, jt, jf) }
func (a *asm) jge(val uint32, jt, jf string)  { a.jif(bpf.JumpGreaterOrEqual, val, jt, jf) }
func (a *asm) jgt(val uint32, jt, jf string)  { a.jif(bpf.JumpGreaterThan, val, jt, jf) }
func (a *asm) jset(val uint32, jt, jf string) { a.jif(bpf.JumpBitsSet, val, jt, jf) }
func (a *asm) ret(v uint32)                   { a.op(bpf.RetConstant{Val: v}) }

// ldb, ldh and ldw load 1, 2 or 4 bytes at offset off of the network
// header into A.
func (a *asm) ldb(off uint32) { a.op(bpf.LoadAbsolute{Off: a.base + off, Size: 1}) }
func (a *asm) ldh(off uint32) { a.op(bpf.LoadAbsolute{Off: a.base + off, Size: 2}) }
func (a *asm) ldw(off uint32) { a.op(bpf.LoadAbsolute{Off: a.base + off, Size: 4}) }

// assemble resolves the labels and encodes the program.
func (a *asm) assemble() ([]bpf.RawInstruction, error) {
	if len(a.ins) > MaxInstructions {
		return nil, fmt.Errorf("the classes' matches need %d classifier instructions, at most %d", len(a.ins), MaxInstructions)
	}
	skip := func(pc int, target string) (int, error) {
		if target == "" {
			return 0, nil
		}
		to, ok := a.labels[target]
		if !ok {
			return 0, fmt.Errorf("classify: label %q undefined", target)
		}
		if to <= pc {
			return 0, fmt.Errorf("classify: jump from %d back to %q", pc, target)
		}
		return to - pc - 1, nil
	}
	prog := make([]bpf.Instruction, len(a.ins))
	for pc, it := range a.ins {
		switch {
		case it.isJump:
			s, err := skip(pc, it.jumpsTo)
			if err != nil {
				return nil, err
			}
			prog[pc] = bpf.Jump{Skip: uint32(s)}
		case it.isCond:
			st, err := skip(pc, it.jt)
			if err != nil {
				return nil, err
			}
			sf, err := skip(pc, it.jf)
			if err != nil {
				return nil, err
			}
			if st > 255 || sf > 255 {
				return nil, fmt.Errorf("classify: conditional jump at %d over %d instructions, at most 255", pc, max(st, sf))
			}
			prog[pc] = bpf.JumpIf{Cond: it.cond, Val: it.val, SkipTrue: uint8(st), SkipFalse: uint8(sf)}
		default:
			prog[pc] = it.op
		}
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("classify: %w", err)
	}
	return raw, nil
}
