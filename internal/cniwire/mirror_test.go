package cniwire_test

import (
	"fmt"
	"reflect"
)

// mirror copies src, a value of the generated code, into dst, the cniwire
// value of the same shape, by Go field name. It fails on a field either side
// lacks, on a named type (message, enum) whose name differs and on a kind
// cniwire has no encoding for, so the generated code's fields are checked
// one to one against cniwire's.
func mirror(dst, src reflect.Value) error {
	switch src.Kind() {
	case reflect.Pointer:
		if dst.Kind() != reflect.Pointer {
			return fmt.Errorf("%s is %s, generated %s", dst.Type(), dst.Kind(), src.Type())
		}
		if src.IsNil() {
			return nil
		}
		dst.Set(reflect.New(dst.Type().Elem()))
		return mirror(dst.Elem(), src.Elem())
	case reflect.Struct:
		return mirrorStruct(dst, src)
	case reflect.Slice:
		if dst.Kind() != reflect.Slice {
			return fmt.Errorf("%s is %s, generated %s", dst.Type(), dst.Kind(), src.Type())
		}
		if src.IsNil() {
			return nil
		}
		dst.Set(reflect.MakeSlice(dst.Type(), src.Len(), src.Len()))
		for i := range src.Len() {
			if err := mirror(dst.Index(i), src.Index(i)); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
		return nil
	case reflect.String, reflect.Bool, reflect.Uint8, reflect.Int32:
		if dst.Kind() != src.Kind() || dst.Type().Name() != src.Type().Name() {
			return fmt.Errorf("%s is %s, generated %s", dst.Type(), dst.Kind(), src.Type())
		}
		dst.Set(src.Convert(dst.Type()))
		return nil
	}
	return fmt.Errorf("generated %s: kind %s has no cniwire encoding: teach cniwire and this test", src.Type(), src.Kind())
}

func mirrorStruct(dst, src reflect.Value) error {
	if dst.Kind() != reflect.Struct || dst.Type().Name() != src.Type().Name() {
		return fmt.Errorf("%s mirrors generated %s", dst.Type(), src.Type())
	}
	exported := 0
	for i := range src.NumField() {
		sf := src.Type().Field(i)
		if !sf.IsExported() {
			continue
		}
		exported++
		df := dst.FieldByName(sf.Name)
		if !df.IsValid() {
			return fmt.Errorf("cniwire.%s has no field %s (generated %s)", dst.Type().Name(), sf.Name, sf.Tag.Get("protobuf"))
		}
		if err := mirror(df, src.Field(i)); err != nil {
			return fmt.Errorf("%s.%s: %w", dst.Type().Name(), sf.Name, err)
		}
	}
	if n := dst.NumField(); n != exported {
		return fmt.Errorf("cniwire.%s has %d fields, generated %d", dst.Type().Name(), n, exported)
	}
	return nil
}

// mirrored is a new cniwire value of ours's type holding gen's fields.
func mirrored(ours, gen any) (any, error) {
	v := reflect.New(reflect.TypeOf(ours).Elem())
	err := mirror(v.Elem(), reflect.ValueOf(gen).Elem())
	return v.Interface(), err
}
