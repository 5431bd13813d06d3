package contain

// ForceScan makes Descendants use the scan of all of /proc (scan true) or
// the children files, and returns a function that undoes it.
func ForceScan(scan bool) (restore func()) {
	haveChildrenFiles() // settle the real answer first
	was := childrenFound.Load()
	childrenFound.Store(!scan)
	return func() { childrenFound.Store(was) }
}
