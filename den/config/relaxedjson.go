package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// relaxJSON turns Disbatch's relaxed JSON into strict JSON: it removes #
// and // comments that start outside strings, and commas that stand right
// before a closing } or ]. Offsets are preserved (removed bytes become
// spaces) so that error positions still point into the original file.
func relaxJSON(src []byte) []byte {
	out := bytes.Clone(src)
	inString, escaped := false, false
	lastComma := -1 // offset of a comma not yet followed by a value
	for i := 0; i < len(out); i++ {
		c := out[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch {
		case c == '"':
			inString = true
			lastComma = -1
		case c == '#' || (c == '/' && i+1 < len(out) && out[i+1] == '/'):
			for ; i < len(out) && out[i] != '\n'; i++ {
				out[i] = ' '
			}
		case c == ',':
			lastComma = i
		case c == '}' || c == ']':
			if lastComma >= 0 {
				out[lastComma] = ' '
			}
			lastComma = -1
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		default:
			lastComma = -1
		}
	}
	return out
}

// parseRelaxedJSON decodes a relaxed JSON object, with errors that give the
// line and column.
func parseRelaxedJSON(src []byte) (map[string]any, error) {
	var m map[string]any
	strict := relaxJSON(src)
	if err := json.Unmarshal(strict, &m); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line, col := position(src, int(se.Offset))
			return nil, fmt.Errorf("line %d, column %d: %v", line, col, se)
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("the file must hold one JSON object: %v", err)
		}
		return nil, err
	}
	return m, nil
}

func position(src []byte, offset int) (line, col int) {
	line, col = 1, 1
	for i := 0; i < offset && i < len(src); i++ {
		if src[i] == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}
