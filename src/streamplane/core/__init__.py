"""Pure core: codecs, range sets, assignment, routing, placement, throttle maths. No I/O."""
