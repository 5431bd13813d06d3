package queue

import (
	"encoding/json"
	"io"
	"math"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// This file holds a task's parameters under their two names: the
// protocol's (Disbatch 2016, 3.99) parameters, and later Disbatch 4's
// params. den writes the name of the queue's schema (Queue.ParamsField),
// reads either (DecodeTask: parameters when both are there), and finds a
// task by its parameters under either (EitherParams).

// Where a task's parameters are.
const (
	FieldParameters = "parameters"
	FieldParams     = "params"
)

// ParamsField is the field the tasks of q carry their parameters in, as
// the Disbatch that writes such a queue writes its tasks: params in a
// later Disbatch 4 queue (its plugin named by plugin), parameters in the
// protocol's (constructor). den reads both in every queue (DecodeTask).
func (q Queue) ParamsField() string {
	if q.pluginLater {
		return FieldParams
	}
	return FieldParameters
}

// paramsPath reports whether key names a task's parameters (params,
// parameters) or a path below them (params.user), and returns what
// follows the name ("", ".user").
func paramsPath(key string) (string, bool) {
	for _, name := range []string{FieldParameters, FieldParams} {
		if rest, ok := strings.CutPrefix(key, name); ok && (rest == "" || rest[0] == '.') {
			return rest, true
		}
	}
	return "", false
}

// EitherParams rewrites a filter of tasks so that its conditions on the
// parameters hold under whichever name a task carries them: every key
// params, parameters, params.PATH or parameters.PATH, at the top or in
// $and, $or and $nor, becomes one $or of two branches, the task's
// parameters (when it has that field, as DecodeTask reads it) and its
// params (when it has no parameters):
//
//	{"params.n": 7}  ->  {$or: [{$and: [{parameters: {$exists: true}}, {"parameters.n": 7}]},
//	                           {$and: [{parameters: {$exists: false}}, {"params.n": 7}]}]}
//
// The guards make a negation right ({"params.n": {$ne: 7}} does not
// match a task whose parameters.n is 7 by its missing params), and each
// branch is the condition itself on one field, so that an index on
// parameters.n and one on params.n serve it on MongoDB. Everything else
// of the filter is kept as given.
func EitherParams(filter bson.D) bson.D {
	rest, under := bson.D{}, bson.D{}
	for _, e := range filter {
		if list, ok := e.Value.(bson.A); ok && (e.Key == "$and" || e.Key == "$or" || e.Key == "$nor") {
			out := make(bson.A, len(list))
			for i, x := range list {
				if d, isDoc := x.(bson.D); isDoc {
					x = EitherParams(d)
				}
				out[i] = x
			}
			rest = append(rest, bson.E{Key: e.Key, Value: out})
			continue
		}
		if sub, ok := paramsPath(e.Key); ok {
			under = append(under, bson.E{Key: sub, Value: e.Value})
			continue
		}
		rest = append(rest, e)
	}
	if len(under) == 0 {
		return rest
	}
	either := eitherParams(under)
	for _, e := range rest {
		if e.Key == "$or" { // a filter has one $or: both under one $and
			return bson.D{{Key: "$and", Value: bson.A{rest, bson.D{either}}}}
		}
	}
	return append(rest, either)
}

// eitherParams is the $or that holds the conditions under (paths below
// the parameters, as paramsPath returns them, and their values) under
// either name.
func eitherParams(under bson.D) bson.E {
	branch := func(field string, exists bool) bson.D {
		and := bson.A{bson.D{{Key: FieldParameters, Value: bson.D{{Key: "$exists", Value: exists}}}}}
		for _, c := range under {
			and = append(and, bson.D{{Key: field + c.Key, Value: c.Value}})
		}
		return bson.D{{Key: "$and", Value: and}}
	}
	return bson.E{Key: "$or", Value: bson.A{branch(FieldParameters, true), branch(FieldParams, false)}}
}

// ParamCondition is the condition that a task's parameter key (a plain
// field, ValidParamKey) equals value under either name (EitherParams); a
// []any value (ParseParamValue's) matches any of its values.
func ParamCondition(key string, value any) bson.E {
	if list, ok := value.([]any); ok {
		value = bson.D{{Key: "$in", Value: bson.A(list)}}
	}
	return eitherParams(bson.D{{Key: "." + key, Value: value}})
}

// ParseParamValue reads the value of a parameter search (KEY=VALUE) as a
// user means it, as TaskFilter.ParamValue takes it: a JSON number matches
// that number (7, -2.5, 1e3; an integer as an int64, which matches the
// same number stored as int32, int64 or double) or its text as typed (a
// task written {"n": "7"}), []any{7, "7"}; true and false likewise the
// boolean or the text; a JSON string only that string ("7" in quotes is
// the text 7 and not the number); anything else is the text itself (ann,
// 01234, null, {"$ne": 1}): never an object, so never an operator.
func ParseParamValue(text string) any {
	v := parseParamJSON(text)
	if _, isText := v.(string); isText {
		return v
	}
	return []any{v, strings.TrimSpace(text)}
}

// parseParamJSON is a parameter search's value as JSON when it is a JSON
// number, string or boolean, else text.
func parseParamJSON(text string) any {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return text
	}
	if _, err := dec.Token(); err != io.EOF {
		return text
	}
	switch v := v.(type) {
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return n
		}
		if f, err := v.Float64(); err == nil && !math.IsInf(f, 0) {
			return f
		}
	case string, bool:
		return v
	}
	return text
}
