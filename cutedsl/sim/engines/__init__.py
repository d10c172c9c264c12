"""Emulator rank 3, the engines: the hardware units instructions drive -- the asynchronous engine
(deferred completion, async-proxy writes), mbarrier objects, the TMA unit (tensor maps, box
placement, swizzle), tensor-core operand layouts and accumulators, block-scale factors, and the
ALU datapath (number formats, rounding, packed operands). Imports ranks 0-2 only."""
