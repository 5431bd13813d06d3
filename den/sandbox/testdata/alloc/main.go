// Command alloc allocates the bytes its argument says, in chunks of 16
// MiB, touching every page so that the kernel gives it the memory, then
// prints "allocated": TestMemoryLimit's program.
package main

import (
	"fmt"
	"os"
	"strconv"
)

var held [][]byte

func main() {
	left, err := strconv.ParseInt(os.Args[1], 10, 64)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	for left > 0 {
		chunk := make([]byte, min(left, 16<<20))
		for i := 0; i < len(chunk); i += 4096 {
			chunk[i] = 1
		}
		held = append(held, chunk)
		left -= int64(len(chunk))
	}
	fmt.Println("allocated")
}
