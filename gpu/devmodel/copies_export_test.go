package devmodel

// SetProducerCopies switches the producers' bf16 copies (copy16) for
// the plans compiled until restore is called: off, every operand is
// cast by the engine (the path before them).
func SetProducerCopies(on bool) (restore func()) {
	was := producerCopies
	producerCopies = on
	return func() { producerCopies = was }
}
