#!/usr/bin/env python3
# tools/sass_order.py: the order of a kernel's wgmma issues, waits and exp2 in
# SASS, read from a cubin without a disassembler (the dev machine has ptxas but
# no cuobjdump / nvdisasm):
#
#   ptxas -arch=sm_90a k.ptx -o k.cubin && python3 tools/sass_order.py k.cubin
#   -> e.g. "3032 E14 A G8 W0 E66 A G16 W1 E5 W0 E61 ..." (instructions, then in
#      program order: A WARPGROUP.ARRIVE, G HGMMA, W<n> WARPGROUP.DEPBAR.LE gsb0 n,
#      E MUFU.EX2; runs counted), and with --list every instruction's opcode.
#
# An sm_90 instruction is 16 bytes; the low 12 bits of its first 8 name the
# opcode (modifiers elsewhere; MUFU's function: bits 10.. of the second), a WARPGROUP.DEPBAR is a WARPGROUP op with bit 47
# of the first word set, its count bits 8.. of the second. The table below was
# built from cuobjdump -sass listings of the attention kernels (s15tattn-1,
# /work/wt/gpu/res/s15tattn-1/*.sass: CUDA 13.0, the same SASS as the dev
# machine's ptxas gives); an opcode not in it prints as ?xxx. docs/PERF.md, s15tattn.
import struct
import subprocess
import sys

OPCODES = {
    0x207: 'SEL',
    0x208: 'FSEL',
    0x209: 'FMNMX',
    0x20b: 'FSETP',
    0x20c: 'ISETP',
    0x210: 'IADD3',
    0x211: 'LEA',
    0x212: 'LOP3',
    0x213: 'IABS',
    0x219: 'SHF',
    0x220: 'FMUL',
    0x221: 'FADD',
    0x223: 'FFMA',
    0x224: 'IMAD',
    0x227: 'IMAD',
    0x23e: 'F2FP',
    0x246: 'VIADDMNMX',
    0x287: 'USEL',
    0x28c: 'UISETP',
    0x290: 'UIADD3',
    0x291: 'ULEA',
    0x292: 'ULOP3',
    0x2a4: 'UIMAD',
    0x2a5: 'UIMAD',
    0x2ca: 'R2UR',
    0x302: 'FCHK',
    0x305: 'F2I',
    0x306: 'I2F',
    0x308: 'MUFU',
    0x388: 'STS',
    0x3b5: 'UTMASTG',
    0x3c6: 'FENCE',
    0x421: 'FADD',
    0x423: 'FFMA',
    0x424: 'IMAD',
    0x446: 'VIADDMNMX',
    0x4a4: 'UIMAD',
    0x51d: 'BAR',
    0x5a7: 'SYNCS',
    0x5b2: 'SYNCS',
    0x5b4: 'UTMALDG',
    0x802: 'MOV',
    0x803: 'P2R',
    0x805: 'CS2R',
    0x807: 'SEL',
    0x808: 'FSEL',
    0x809: 'FMNMX',
    0x80b: 'FSETP',
    0x80c: 'ISETP',
    0x810: 'IADD3',
    0x811: 'LEA',
    0x812: 'LOP3',
    0x819: 'SHF',
    0x81c: 'PLOP3',
    0x820: 'FMUL',
    0x823: 'FFMA',
    0x824: 'IMAD',
    0x825: 'IMAD',
    0x82f: 'ELECT',
    0x836: 'VIADD',
    0x844: 'STSM',
    0x848: 'VIMNMX',
    0x882: 'UMOV',
    0x886: 'VOTEU',
    0x887: 'USEL',
    0x88c: 'UISETP',
    0x890: 'UIADD3',
    0x891: 'ULEA',
    0x892: 'ULOP3',
    0x897: 'UIADD3',
    0x899: 'USHF',
    0x8a4: 'UIMAD',
    0x8a5: 'UIMAD',
    0x906: 'I2F',
    0x908: 'MUFU',
    0x918: 'NOP',
    0x919: 'S2R',
    0x91a: 'DEPBAR',
    0x941: 'BSYNC',
    0x942: 'BREAK',
    0x944: 'CALL',
    0x945: 'BSSY',
    0x946: 'YIELD',
    0x947: 'BRA',
    0x948: 'WARPSYNC',
    0x94d: 'EXIT',
    0x950: 'RET',
    0x95d: 'NANOSLEEP',
    0x986: 'STG',
    0x98f: 'CCTL',
    0x992: 'MEMBAR',
    0x9a7: 'SYNCS',
    0x9b7: 'UTMACMDFLUSH',
    0x9b9: 'UTMACCTL',
    0x9c3: 'S2UR',
    0x9c5: 'WARPGROUP',
    0x9c8: 'USETMAXREG',
    0x9f0: 'HGMMA',
    0xab9: 'ULDC',
    0xb1d: 'BAR',
    0xb82: 'LDC',
    0xc0c: 'ISETP',
    0xc10: 'IADD3',
    0xc11: 'LEA',
    0xc12: 'LOP3',
    0xc13: 'IABS',
    0xc20: 'FMUL',
    0xc23: 'FFMA',
    0xc24: 'IMAD',
    0xc27: 'IMAD',
    0xc36: 'VIADD',
    0xc46: 'VIADDMNMX',
    0xc48: 'VIMNMX',
    0xc82: 'UMOV',
    0xd06: 'I2F',
    0xdf0: 'HGMMA',
    0xe24: 'IMAD',
    0xf89: 'SHFL'
}


def text_of(path):
    out = subprocess.run(["readelf", "-S", "-W", path], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if "] .text." in line:
            f = line.split("]")[1].split()
            off, size = int(f[3], 16), int(f[4], 16)
            with open(path, "rb") as fh:
                return fh.read()[off:off + size]
    raise SystemExit("sass_order: no .text section in " + path)


def instructions(data):
    for i in range(0, len(data), 16):
        w0, w1 = struct.unpack_from("<QQ", data, i)
        op = OPCODES.get(w0 & 0xfff, "?%03x" % (w0 & 0xfff))
        if op == "WARPGROUP":
            op = "WARPGROUP.DEPBAR%d" % ((w1 >> 8) & 7) if (w0 >> 47) & 1 else "WARPGROUP.ARRIVE"
        yield i, op, w0, w1


def event(op, w0, w1):
    if op == "WARPGROUP.ARRIVE":
        return "A"
    if op.startswith("WARPGROUP.DEPBAR"):
        return "W" + op[16:]
    if op == "HGMMA":
        return "G"
    if op == "MUFU" and ((w1 >> 10) & 0xf) == 2:  # (MUFU's function, bits 10.. of the second word: EX2 2, LG2 3, RCP 4)
        return "E"
    return None


def main(argv):
    if len(argv) < 2:
        raise SystemExit(__doc__ or "usage: sass_order.py K.cubin [--list]")
    ins = list(instructions(text_of(argv[1])))
    if "--list" in argv:
        for a, op, _, _ in ins:
            print("%05x %s" % (a, op))
        return
    out, prev, n = [], None, 0
    for _, op, w0, w1 in ins:
        k = event(op, w0, w1)
        if not k:
            continue
        if k == prev:
            n += 1
        else:
            if prev:
                out.append(prev + (str(n) if n > 1 else ""))
            prev, n = k, 1
    if prev:
        out.append(prev + (str(n) if n > 1 else ""))
    print(len(ins), " ".join(out))


if __name__ == "__main__":
    main(sys.argv)
